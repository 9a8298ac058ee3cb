// Ulysses cp checks against the model and the per-layer all-to-all sizes (see the header).
#include "model/context_parallel.h"

#include <algorithm>

#include "model/errors.h"

namespace shardtune::model {

int KvRepeat(const ModelSpec& spec, int cp) {
  SHARDTUNE_CHECK(cp >= 1 && spec.num_kv_heads >= 1)
      << "cp " << cp << ", kv heads " << spec.num_kv_heads;
  return std::max(cp / spec.num_kv_heads, 1);
}

std::vector<std::string> CpProblems(const ModelSpec& spec, const Plan& plan, int world,
                                    int gpus_per_node, const std::string& where) {
  std::vector<std::string> out;
  const int cp = plan.cp;
  if (cp <= 1 || world < 1 || world % cp != 0) return out;  // Plan::Problems reports those
  auto add = [&](const std::string& expected, const std::string& got) {
    out.push_back(where + ":/cp: expected " + expected + ", got " + got);
  };
  const std::string cp_text = std::to_string(cp);
  if (spec.mla.enabled()) {
    // verl's Ulysses all-to-alls act on q, k, v of Llama-style attention; MLA's latent kv is not
    // split by heads before kv_b_proj, and no Ulysses implementation for it is modelled.
    add("1 for " + spec.name + " (multi-head latent attention: Ulysses cp is not modelled for MLA)",
        cp_text);
    return out;
  }
  if (spec.num_heads < 1 || spec.num_heads % cp != 0) {
    add("a divisor of num_heads " + std::to_string(spec.num_heads) + " of " + spec.name +
            " (Ulysses gives each rank num_heads / cp heads; --cp)",
        cp_text);
  }
  const int kv = spec.num_kv_heads;
  if (kv >= 1 && kv % cp != 0 && cp % kv != 0) {
    add("a divisor or a multiple of num_key_value_heads " + std::to_string(kv) + " of " +
            spec.name + " (verl repeats KV heads only by a whole factor; --cp)",
        cp_text);
  }
  if (plan.Sharded() && plan.cp_fsdp_mesh == CpFsdpMesh::kDpCp) {
    int shard = plan.ResolvedShardGroup(world, gpus_per_node);
    if (shard >= 1 && world % shard == 0 && shard % cp != 0) {
      add("cp x dp_shard x dp_replicate = world " + std::to_string(world) +
              ": with cp_fsdp_mesh dp_cp the shard group " + std::to_string(shard) +
              " must hold whole cp groups (a multiple of cp; --cp, --shard-group)",
          cp_text + " (dp_shard = " + std::to_string(shard) + " / " + cp_text + " is not whole)");
    }
  }
  return out;
}

UlyssesAllToAll UlyssesAllToAllPerLayer(const ModelSpec& spec, const Plan& plan, int64_t seq_len) {
  UlyssesAllToAll a;
  if (plan.cp <= 1) return a;
  SHARDTUNE_CHECK(seq_len % plan.cp == 0) << "seq_len " << seq_len << " cp " << plan.cp;
  // [B, S/cp, heads, d] in the compute dtype (e bytes).
  const int64_t tokens = static_cast<int64_t>(plan.micro_batch) * (seq_len / plan.cp);
  const int64_t e = BytesPerElement(plan.param_dtype);
  a.q_bytes = tokens * spec.q_dim() * e;
  a.k_bytes = tokens * spec.kv_dim() * KvRepeat(spec, plan.cp) * e;
  a.v_bytes = a.k_bytes;
  a.out_bytes = a.q_bytes;
  a.calls = 4;
  return a;
}

}  // namespace shardtune::model

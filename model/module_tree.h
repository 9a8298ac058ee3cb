// The model as a tree of PyTorch modules with their parameter tensors (HF transformers naming),
// FLOPs per token, and the FSDP units a wrap policy makes of it. A unit is what one fully_shard
// call manages: its parameters are all-gathered, freed and reduce-scattered together.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"
#include "model/units.h"

namespace shardtune::model {

// One parameter tensor. FSDP2 shards and pads dim 0 (torch.chunk over the shard group).
struct ParamTensor {
  std::string name;
  int64_t dim0 = 0;
  int64_t inner = 1;  // product of the other dims
  int segment = 0;    // forward segment that uses it (its gradient appears in that backward)
  bool requires_grad = true;  // false: frozen (no gradient, reduce-scatter or optimizer state)
  bool lora_adapter = false;  // a LoRA A or B matrix (stored in Plan::lora.dtype)
  // Expert parallelism (Plan::ep, model/expert_parallel.h): a routed expert's local 3-D weight
  // [E / ep, d1, d2] is FSDP-sharded over n / shard_divisor ranks (torchtitan's efsdp mesh);
  // dim1 > 0 is its dim 1, which torchtitan shards instead of dim 0 when efsdp x ep exceeds
  // experts_total (apply_fsdp's Shard(1)). 1 / 0 / 0 for every other parameter.
  int shard_divisor = 1;
  int64_t dim1 = 0;
  int64_t experts_total = 0;
  int64_t numel() const { return dim0 * inner; }
  // Ranks this parameter is sharded over when the unit's mesh has n ranks.
  int ShardRanks(int n) const {
    return shard_divisor > 1 && n % shard_divisor == 0 ? n / shard_divisor : n;
  }
  bool ShardsDim1(int n) const {
    return dim1 > 0 && static_cast<int64_t>(ShardRanks(n)) * shard_divisor > experts_total;
  }
  // Elements per rank after FSDP2's padding of the sharded dim: ceil(dim0 / n) * inner
  // (torch/distributed/fsdp/_fully_shard/_fsdp_param.py, _init_sharded_param); Shard(1) pads
  // dim 1 instead: dim0 * ceil(dim1 / n) * (inner / dim1).
  int64_t PaddedShardNumel(int n) const {
    if (shard_divisor == 1) return (dim0 + n - 1) / n * inner;  // every non-expert-parallel one
    int m = ShardRanks(n);
    if (ShardsDim1(n)) return dim0 * ((dim1 + m - 1) / m) * (inner / dim1);
    return (dim0 + m - 1) / m * inner;
  }
  // The all-gather output of this parameter: its padded shard times the ranks it is sharded over.
  int64_t GatheredNumel(int n) const { return PaddedShardNumel(n) * ShardRanks(n); }
};

// Forward runs in segments: 0 = embeddings, 1..L = blocks, L+1 = final norm, L+2 = LM head + loss.
// L counts every block (ModelSpec::NumBlocks): a VL model's vision blocks come first (segments
// 1..V, the patch embedding with the first, the merger with the last), then the text layers.
inline int BlockSegment(int block) { return 1 + block; }
inline int FinalNormSegment(int num_layers) { return num_layers + 1; }
inline int HeadSegment(int num_layers) { return num_layers + 2; }
inline int NumSegments(int num_layers) { return num_layers + 3; }

// A parameter of a VL model's vision tower, merger or projector (BuildModuleTree's names).
bool IsVisionParameter(const std::string& name);
// The module name of vision block `b` ("model.visual.blocks.3",
// "model.vision_tower.vision_model.encoder.layers.3"). REQUIRES spec.vision.enabled().
std::string VisionBlockName(const ModelSpec& spec, int b);
// The module a forward segment runs: "model.embed_tokens", a vision block's or a text layer's
// name ("model.layers.N"), "model.norm", "lm_head".
std::string SegmentName(const ModelSpec& spec, int segment);

struct ModuleNode {
  std::string name;                 // attribute path, e.g. "model.layers.3.mlp"
  std::string type;                 // e.g. "LlamaDecoderLayer", "ModuleList", "Linear"
  std::vector<ParamTensor> params;  // owned directly, not by children
  std::vector<ModuleNode> children;
  int first_segment = 0, last_segment = 0;  // forward segments its forward spans
  bool is_container = false;        // ModuleList: never wrapped by size_based_auto_wrap_policy
  int64_t NumParams() const;        // own + all descendants
};

// HF-style module tree: XForCausalLM{model{[visual | vision_tower + multi_modal_projector],
// embed_tokens, [embed_positions], layers[...], norm}, lm_head}. A tied LM head has no parameter
// of its own (it reuses embed_tokens.weight). A VL model's tower is named as transformers >= 4.52
// names its modules: model.visual.{patch_embed.proj, pos_embed, blocks.N, merger,
// deepstack_merger_list.K} (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) and model.vision_tower.vision_model
// .{embeddings, encoder.layers.N, post_layernorm} with model.multi_modal_projector (Gemma 3).
ModuleNode BuildModuleTree(const ModelSpec& spec);

// Forward FLOPs per token of one block at sequence length S: 2 x matmul weights (active experts
// only for MoE) + attention scores and values 2 x 2 x S x q_dim (Narayanan et al. 2021, eq. 3;
// full S x S, no causal halving, as the PaLM MFU convention; a sliding layer's window in place of
// S, averaged over the layers). Backward is 2x forward. `layer`: which block (0-based), since a
// dense prefix (moe.first_dense_layers) makes blocks differ.
Flops BlockForwardFlopsPerToken(const ModelSpec& spec, int64_t seq_len, int layer);
// The mean over the blocks of BlockForwardFlopsPerToken (one block when all are alike).
Flops MeanBlockForwardFlopsPerToken(const ModelSpec& spec, int64_t seq_len);
// Its attention part (scores and values), averaged over the layers: 2 x span x (q_dim + v_dim),
// span the ModelSpec::MeanAttentionSpan (S without sliding windows); 4 x span x q_dim unless MLA.
Flops AttentionForwardFlopsPerToken(const ModelSpec& spec, int64_t seq_len);
// LM head forward FLOPs per token: 2 x V x H.
Flops HeadForwardFlopsPerToken(const ModelSpec& spec);
// Parameters a token touches (MoE: top_k + shared experts), without embeddings' lookups.
int64_t ActiveParamsPerToken(const ModelSpec& spec);

struct FsdpUnit {
  std::string name;                 // e.g. "model.layers.3", "model.layers.0-3", "root"
  std::vector<ParamTensor> params;
  int first_segment = 0, last_segment = 0;  // gathered from pre-forward of first to post-forward of last
  bool is_root = false;             // fully_shard(model): not resharded after forward
  bool is_expert = false;           // one MoE expert (WrapPolicy::expert_units), inside its block
  // An MoE layer's local routed experts under expert parallelism (Plan::ep > 1), inside its
  // block, sharded over the efsdp mesh (shard group / ep ranks, strided by ep).
  bool expert_parallel = false;
  int64_t NumParams() const;
  int64_t PaddedShardNumel(int n) const;  // sum over params
  int64_t GatheredNumel(int n) const;     // sum over params of ParamTensor::GatheredNumel
  // Ranks its all-gather and reduce-scatter span when the FSDP shard group has n ranks.
  int ShardRanks(int n) const { return params.empty() ? n : params.front().ShardRanks(n); }
};

// Applies the wrap policy. Units come in forward order of their first segment (outer first);
// every parameter is in exactly one unit; the root unit is last-resort owner and always exists.
// ep > 1 (Plan::ep): each MoE layer's routed experts become one unit of the num_experts / ep
// local experts in torchtitan's GroupedExperts layout (w1 [E/ep, F, H], w2 [E/ep, H, F], w3
// [E/ep, F, H]; GPT-OSS: its four expert tensors with dim 0 E/ep), nested in the block's unit
// (torchtitan apply_fsdp: fully_shard(moe.experts, mesh=efsdp) before the block).
// REQUIRES: policy validated against spec (Plan::Problems), ep divides num_experts.
std::vector<FsdpUnit> BuildFsdpUnits(const ModelSpec& spec, const WrapPolicy& policy, int ep = 1);

// A parameter as transformers' checkpoint of spec.hf_architecture names and shapes it (the
// names from_pretrained loads; the Hub's per-expert layout, which transformers 5 converts on
// load). The module tree names every MoE block as Mixtral's ("block_sparse_moe", experts'
// gate_proj / up_proj / down_proj); the checkpoints name them:
//   MixtralForCausalLM: block_sparse_moe.experts.N.w1 (gate) / w3 (up) / w2 (down);
//   Qwen2MoeForCausalLM, Qwen3MoeForCausalLM: mlp.gate, mlp.experts.N.*, mlp.shared_expert(_gate);
//   DeepseekV2/V3ForCausalLM: mlp.gate, mlp.experts.N.*, mlp.shared_experts.*;
//   GptOssForCausalLM: mlp.router (weight, bias), mlp.experts.gate_up_proj [E, H, 2F],
//     gate_up_proj_bias [E, 2F], down_proj [E, F, H], down_proj_bias [E, H].
// Other names and shapes are the module tree's. `shape`: the module tree's shape, replaced when
// transformers holds the tensor in another one.
// The HF per-expert module (gate_proj, up_proj, down_proj) whose weight slice e of an
// expert-parallel unit's GroupedExperts tensor `tensor` holds (AddExpertParallelUnits' layout): w1
// is gate_proj (up_proj for ungated experts), w3 up_proj, w2 down_proj; "" for other tensors
// (GPT-OSS's 3-D experts keep their HF names). The executor initialises, runs and exports the
// local experts through it.
std::string GroupedExpertHfModule(const std::string& tensor, bool gated);

struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
};
HfTensor HfParameter(const ModelSpec& spec, const std::string& name, std::vector<int64_t> shape);
// Checkpoint tensors that are no module-tree parameter but a persistent buffer transformers loads:
// DeepSeek-V3's mlp.gate.e_score_correction_bias [E] (fp32, zeros as transformers initialises it;
// nothing updates it in training here) after the router weight of HF name `hf_name`; empty else.
std::vector<HfTensor> HfBuffersAfter(const ModelSpec& spec, const std::string& hf_name);

}  // namespace shardtune::model

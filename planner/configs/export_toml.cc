// TOML export: a torchtitan job config (the TOML files of torchtitan v0.2.x, read by
// torchtitan/config/job_config.py). Written as text; strings are TOML basic strings.
#include <sstream>
#include <utility>

#include "model/activations.h"
#include "planner/configs/export_formats.h"
#include "planner/configs/torchtitan_models.h"

namespace shardtune::configs::internal {
namespace {

using model::DType;

const char* TomlBool(bool b) { return b ? "true" : "false"; }

// Training.mixed_precision_param: Literal["bfloat16", "float32"]; fp16 has no value.
const char* TorchtitanParamDtype(DType d) { return d == DType::kFp32 ? "float32" : "bfloat16"; }

std::vector<std::string> TorchtitanNotes(const model::Plan& p, const ExportContext& ctx,
                                         const Layout& l) {
  const std::string target = "torchtitan";
  std::vector<std::string> notes;
  if (TorchtitanModel(ctx.model_name).first.empty()) {
    notes.push_back("model " + ctx.model_name +
                    ": no torchtitan model flavor is known to match; set "
                    "[model] name and flavor yourself");
  }
  if (p.modeling == model::Modeling::kHf) {
    notes.push_back(
        "modeling hf: torchtitan runs its own model code; estimate with modeling torchtitan "
        "for its activation memory");
  }
  AddModelFeatureNotes(p, target, /*has_cp=*/true, &notes);
  if (p.cp > 1) {
    notes.push_back("cp " + std::to_string(p.cp) +
                    ": written as context_parallel_degree, which is ring attention in torchtitan "
                    "(not Ulysses); its communication differs from the plan's all-to-all");
  }
  AddWrapNote(p, ctx, target, /*supports_size=*/false, &notes);
  if (!p.wrap.embedding_unit || !p.wrap.head_unit) {
    notes.push_back(
        "embedding_unit/head_unit: torchtitan always wraps the embedding and [norm, output] "
        "as their own units (parallelize.py apply_fsdp)");
  }
  if (p.offload == model::Offload::kOptimizer) {
    notes.push_back(
        "offload optimizer: training.enable_cpu_offload moves parameters, gradients and "
        "optimizer state together; written as false");
  }
  if (l.replicated_only() && p.offload == model::Offload::kAll) {
    notes.push_back(
        "offload all: torchtitan's DDP path (data_parallel_shard_degree 1) has no CPU offload");
  }
  if (p.no_sync && p.grad_accum > 1) {
    notes.push_back("no_sync true: torchtitan reduce-scatters after every micro-batch");
  }
  AddPrefetchNotes(p, target, &notes);
  if (p.param_dtype == DType::kFp16) {
    notes.push_back(
        "param_dtype fp16: mixed_precision_param takes bfloat16 or float32; written as bfloat16");
  }
  if (p.reduce_dtype != DType::kFp32) {
    notes.push_back(std::string("reduce_dtype ") + model::ToString(p.reduce_dtype) +
                    ": mixed_precision_reduce only takes float32");
  }
  if (p.master_dtype == DType::kFp16) {
    notes.push_back(
        "master_dtype fp16: training.dtype takes bfloat16 or float32; written as float32");
  }
  if (p.optimizer != model::Optimizer::kAdamW) {
    notes.push_back(std::string("optimizer ") + model::ToString(p.optimizer) +
                    ": torchtitan's build_optimizers knows Adam and AdamW only; written as AdamW");
  }
  if (p.checkpointing == model::Checkpointing::kFirstK) {
    notes.push_back("checkpointing " + model::CheckpointingSpecToString(p) +
                    ": torchtitan's activation_checkpoint has full, selective (op or every N-th block) "
                    "and memory_budget, no first-k" + std::string(p.checkpoint_rest_selective ? " nor a per-block mix" : "") +
                    "; written as mode full (less activation memory, more recompute than the plan)");
  }
  if (p.checkpointing == model::Checkpointing::kBlocks || model::ExplicitSacSave(p)) {
    notes.push_back("checkpointing " + model::CheckpointingSpecToString(p) +
                    ": torchtitan's selective_ac_option \"op\" saves its own list (every second mm, the "
                    "attention kernel's output) in every block, and memory_budget leaves the choice to the "
                    "compiler; no per-block policy nor save set of one's own; written as mode full (less "
                    "activation memory, more recompute than the plan)");
  }
  AddActivationOffloadNote(p, "torchtitan", &notes);
  if (p.attention == model::Attention::kEager) {
    notes.push_back("attention eager: torchtitan flavors use SDPA (or flex); no eager attention");
  }
  return notes;
}

void WriteCheckpointSection(const model::Plan& p, std::ostream& t) {
  // ActivationCheckpoint.mode: "selective" | "full" | "memory_budget" | "none"; selective_ac_option
  // "op" (per-op SAC) or a positive integer N (checkpoint every N-th block,
  // torchtitan/distributed/activation_checkpoint.py).
  t << "\n[activation_checkpoint]\n";
  switch (p.checkpointing) {
    case model::Checkpointing::kNone:
      t << "mode = \"none\"\n";
      break;
    case model::Checkpointing::kFull:
      t << "mode = \"full\"\n";
      break;
    case model::Checkpointing::kSelective:
      // A save set of the plan's own has no key: full, with a note (TorchtitanNotes).
      t << (model::ExplicitSacSave(p) ? "mode = \"full\"\n" : "mode = \"selective\"\nselective_ac_option = \"op\"\n");
      break;
    case model::Checkpointing::kEveryK:
      t << "mode = \"selective\"\nselective_ac_option = "
        << Quote(std::to_string(p.checkpoint_every_k)) << "\n";
      break;
    case model::Checkpointing::kFirstK:  // no first-k mode: full, with a note (TorchtitanNotes)
    case model::Checkpointing::kBlocks:  // no per-block policy either
      t << "mode = \"full\"\n";
      break;
  }
}

}  // namespace

// torchtitan job TOML (`--job.config_file`). Keys read in pytorch/torchtitan v0.2.2
// (73a0e69, 2026-02-20), the last release configured by TOML (#2386 replaced it with Python
// configs): torchtitan/config/job_config.py (Training.local_batch_size, global_batch_size, seq_len,
// max_norm, enable_cpu_offload, dtype, mixed_precision_param, mixed_precision_reduce;
// Parallelism.data_parallel_replicate_degree, data_parallel_shard_degree,
// fsdp_reshard_after_forward "default"|"always"|"never"; ActivationCheckpoint.mode,
// selective_ac_option; Optimizer.name, implementation), torchtitan/train.py (gradient
// accumulation = global_batch_size / (local_batch_size x dp degree)),
// torchtitan/models/llama3/infra/parallelize.py apply_fsdp ("default" keeps [norm, output]
// gathered after forward; "always" reshards every unit, as shardtune does),
// torchtitan/models/llama3/train_configs/llama3_8b.toml (layout).
ExportResult ExportTorchtitan(const model::Plan& p, const ExportContext& ctx) {
  Layout l = ResolveLayout(p, ctx);
  ExportResult r;
  r.notes = TorchtitanNotes(p, ctx, l);
  auto [name, flavor] = TorchtitanModel(ctx.model_name);
  std::ostringstream t;
  t << "[model]\n";
  if (name.empty()) {
    t << "# name and flavor: no torchtitan model matches " << OneLine(ctx.model_name) << "\n";
  } else {
    t << "name = " << Quote(name) << "\nflavor = " << Quote(flavor) << "\n";
  }
  t << "\n[optimizer]\nname = \"AdamW\"\nimplementation = "
    << Quote(p.optimizer_impl == model::OptimizerImpl::kForLoop ? "for-loop"
                                                                : model::ToString(p.optimizer_impl))
    << "\n";
  t << "\n[training]\n";
  t << "local_batch_size = " << p.micro_batch << "\n";
  t << "global_batch_size = " << ctx.global_batch << "  # grad-accum " << p.grad_accum << "\n";
  t << "seq_len = " << ctx.seq_len << "\n";
  t << "max_norm = " << FormatFloat(ctx.max_grad_norm > 0 ? ctx.max_grad_norm : 0.0) << "\n";
  t << "enable_cpu_offload = "
    << TomlBool(p.offload == model::Offload::kAll && !l.replicated_only()) << "\n";
  t << "dtype = " << Quote(p.master_dtype == DType::kBf16 ? "bfloat16" : "float32") << "\n";
  t << "mixed_precision_param = " << Quote(TorchtitanParamDtype(p.param_dtype)) << "\n";
  t << "mixed_precision_reduce = \"float32\"\n";
  t << "\n[parallelism]\n";
  t << "data_parallel_replicate_degree = " << l.replicate << "\n";
  // ParallelDims: replicate x shard x cp = world; fully_shard runs on the dp_shard x cp mesh.
  t << "data_parallel_shard_degree = "
    << (p.cp > 1 && l.shard % p.cp == 0 ? l.shard / p.cp : l.shard) << "\n";
  t << "fsdp_reshard_after_forward = " << Quote(l.reshard_after_forward ? "always" : "never")
    << "\n";
  t << "tensor_parallel_degree = 1\npipeline_parallel_degree = 1\ncontext_parallel_degree = "
    << p.cp << "\n";
  // ParallelDims: ep borrows its ranks from dp_shard x cp (efsdp = dp_shard x cp / ep).
  t << "expert_parallel_degree = " << p.ep << "\n";
  WriteCheckpointSection(p, t);
  r.text = CommentedText(
      "torchtitan job config: torchrun ... -m torchtitan.train --job.config_file THIS "
      "(torchtitan <= 0.2.2; later versions take Python configs)",
      p, ctx, r.notes, "\n" + t.str());
  return r;
}

}  // namespace shardtune::configs::internal

// verl export: the FSDP worker of verl's PPO trainer as a Hydra override file (the keys of
// verl/trainer/config/ppo_trainer.yaml it changes): actor_rollout_ref.actor for a training plan
// with verl's log-prob head, actor_rollout_ref.ref for an inference plan; a training plan with a
// plain cross-entropy is an SFT job, written over sft_trainer.yaml. Written as text;
// planner/configs/import_verl.cc reads it.
#include <algorithm>
#include <sstream>

#include "planner/configs/export_formats.h"

namespace shardtune::configs::internal {
namespace {

using model::DType;

const char* YamlBool(bool b) { return b ? "true" : "false"; }

// What a PPO export writes for the data and the batch: the sequence length, the prompt /
// response split, the sequences per update over all ranks and rollout.n (the config's, when the
// plan was tuned from one: ExportContext's verl_*).
struct PpoBatch {
  int64_t seq = 0;           // max_prompt_length + max_response_length
  bool split_known = false;  // the source config's split, of the same length
  int64_t prompt = 0;        // the source's, else half
  // Rows' sequences for a packed plan (import_verl.cc counts min(n, ceil(n x seq / row)) rows
  // for n sequences per rank), else micro x accum; times the data-parallel ranks.
  int64_t sequences = 0;
  bool n_from_config = false;  // ExportContext::verl_rollout_n was given
  int n = 1;  // samples per prompt; 1 when not given or not dividing the sequences
};

PpoBatch PpoBatchOf(const model::Plan& p, const ExportContext& ctx) {
  PpoBatch b;
  const bool packed = p.packed_seq_len > 0;
  b.seq = packed ? p.packed_seq_len : ctx.seq_len;
  b.split_known = ctx.verl_prompt_length > 0 &&
                  ctx.verl_prompt_length + ctx.verl_response_length == b.seq;
  b.prompt = b.split_known ? ctx.verl_prompt_length : b.seq / 2;
  if (p.loss_kernel == model::LossKernel::kVerlPaddedCe && p.response_len > 0 &&
      p.response_len <= b.seq) {  // the padded head's response part is the plan's own
    b.split_known = true;
    b.prompt = b.seq - p.response_len;
  }
  b.sequences = (packed ? p.grad_accum * p.seq_len / b.seq
                        : static_cast<int64_t>(p.micro_batch) * p.grad_accum) *
                p.DataParallel(ctx.world_size);
  b.n_from_config = ctx.verl_rollout_n > 0;
  if (p.role == model::Role::kTrain && b.n_from_config && b.sequences % ctx.verl_rollout_n == 0) {
    b.n = ctx.verl_rollout_n;
  }
  return b;
}

// `sft`: the SFT trainer's config (no prompt/response split, no rollout).
std::vector<std::string> VerlNotes(const model::Plan& p, const ExportContext& ctx,
                                   const Layout& l, bool sft) {
  const std::string target = "verl's FSDP workers";
  std::vector<std::string> notes;
  bool train = p.role == model::Role::kTrain;
  const PpoBatch batch = PpoBatchOf(p, ctx);
  if (!sft && !batch.split_known) {
    notes.push_back("sequence length " + std::to_string(batch.seq) +
                    " = data.max_prompt_length + data.max_response_length; the split is yours, "
                    "the sum decides memory");
  }
  if (!sft && !model::IsVerlLogProbHead(p.loss_kernel)) {
    notes.push_back("loss_kernel " + std::string(model::ToString(p.loss_kernel)) +
                    ": verl's workers compute log-probs their own way (packed logits, flash-attn "
                    "cross-entropy: loss_kernel verl_flash_ce)");
  }
  // Also when the config's n does not divide the sequences and n 1 was written instead.
  if (train && !sft && !(batch.n_from_config && batch.n == ctx.verl_rollout_n)) {
    notes.push_back(
        "ppo_mini_batch_size counts prompts with rollout.n 1; with n samples per "
        "prompt divide it by n");
  }
  if (l.replicated_only()) {
    notes.push_back(std::string(model::ToString(p.strategy)) + ": " + target +
                    " always shard (fsdp_size -1 is all ranks); written as FSDP over all " +
                    std::to_string(ctx.world_size) + " ranks");
  }
  AddWrapNote(p, ctx, target, /*supports_size=*/true, &notes);
  if (p.wrap.embedding_unit || p.wrap.head_unit) {
    notes.push_back("embedding_unit/head_unit: verl wraps " + ctx.layer_class +
                    " (or by size) only; the embedding and [norm, head] stay in the root unit");
  }
  if (p.wrap.expert_units) notes.push_back("expert units: verl has no per-expert wrapping");
  if (p.ep > 1) {
    notes.push_back("ep " + std::to_string(p.ep) + ": " + target +
                    " have no expert parallelism; written without (every rank holds every "
                    "expert: estimate that plan with --ep 1)");
  }
  AddBlockCheckpointNote(p, target, &notes);
  if (p.activation_offload_blocks > 0) {
    notes.push_back("activation_offload " + model::ActivationOffloadSpecToString(p) + ": " + target +
                    "'s enable_activation_offload offloads every layer but the last; written as that (less GPU "
                    "memory, more PCIe traffic and pinned host memory than the plan)");
  }
  AddFusedLossNote(p, target, &notes);
  if (p.liger.any() && !(p.liger.rms_norm && p.liger.swiglu && p.liger.rope)) {
    // import_verl.cc ReadModel: use_liger applies Liger's defaults, all three.
    notes.push_back("liger: verl's use_liger turns on rms_norm, swiglu and rope together; the "
                    "plan's subset is written as use_liger false");
  }
  if (train && p.entropy_from_logits) {
    // import_verl.cc ReadLogProbPath: what sets the flag on each head.
    notes.push_back(p.loss_kernel == model::LossKernel::kVerlFusedTorch
                        ? "entropy_from_logits: the entropy's gradient reaches the fused head only "
                          "with actor.entropy_coeff != 0 (actor.yaml: 0); set your coefficient"
                        : "entropy_from_logits: the entropy is computed with actor.calculate_entropy "
                          "true or entropy_coeff != 0 (actor.yaml: false and 0); set yours");
  }
  if (train) {
    AddOptimizerOffloadNote(p, target, &notes);
  } else if (p.offload != model::Offload::kAll) {
    notes.push_back("offload " + std::string(model::ToString(p.offload)) +
                    ": verl's reference worker always offloads its parameters to the host "
                    "(fsdp_workers.py CPUOffloadPolicy for non-actor roles)");
  }
  if (p.no_sync && p.grad_accum > 1) {
    notes.push_back("no_sync true: verl's actor reduce-scatters after every micro-batch");
  }
  if (p.backward_prefetch != model::BackwardPrefetch::kPre) {
    notes.push_back(std::string("backward_prefetch ") + model::ToString(p.backward_prefetch) +
                    ": verl has no setting for it");
  }
  if (p.max_inflight_allgathers != 2) {
    notes.push_back("max_inflight_allgathers: verl has no setting for it");
  }
  if (p.cp > 1 && p.cp_fsdp_mesh == model::CpFsdpMesh::kDp) {
    notes.push_back("cp_fsdp_mesh dp: verl shards over all ranks (the Ulysses mesh is separate)");
  }
  if (!p.frozen_prefixes.empty()) {
    notes.push_back(
        "frozen prefixes: verl has no general freeze setting (only "
        "actor.freeze_vision_tower)");
  }
  if (p.lora.enabled() && p.lora.dtype != DType::kFp32) {
    notes.push_back("lora dtype " + std::string(model::ToString(p.lora.dtype)) +
                    ": verl keeps PEFT's fp32 adapters");
  }
  // fsdp_workers.py _build_model_optimizer loads the whole model with torch_dtype = model_dtype
  // (written from master_dtype) before get_peft_model.
  AddFrozenDtypeNote(p, "verl loads the whole model in fsdp_config.model_dtype (written: " +
                            std::string(model::ToString(p.master_dtype)) + ")",
                     &notes);
  if (p.optimizer != model::Optimizer::kAdamW) {
    notes.push_back("optimizer " + OptimizerText(p) + ": verl's FSDP workers build AdamW");
  }
  if (p.attention == model::Attention::kEager) {
    notes.push_back("attention eager: set override_config.attn_implementation yourself");
  }
  return notes;
}

// fsdp_config at `indent` (the actor's "    ", the SFT model's "  "); `header` names the section
// (the engine SFT trainer's is the top-level `engine`).
void WriteFsdpConfig(const model::Plan& p, const ExportContext& ctx, const Layout& l,
                     const std::string& indent, std::ostream& y,
                     const std::string& header = "fsdp_config") {
  const std::string i1 = indent + "  ", i2 = indent + "    ";
  y << indent << header << ":\n";
  y << i1 << "fsdp_size: " << (l.hybrid() ? l.shard : -1) << "\n";
  y << i1 << "reshard_after_forward: " << YamlBool(l.reshard_after_forward) << "\n";
  y << i1 << "offload_policy: " << YamlBool(p.offload == model::Offload::kAll) << "\n";
  y << i1 << "param_offload: false\n" << i1 << "optimizer_offload: false\n";
  y << i1 << "forward_prefetch: " << YamlBool(p.forward_prefetch) << "\n";
  y << i1 << "model_dtype: " << model::ToString(p.master_dtype) << "\n";
  y << i1 << "mixed_precision:\n";
  y << i2 << "param_dtype: " << model::ToString(p.param_dtype) << "\n";
  y << i2 << "reduce_dtype: " << model::ToString(p.reduce_dtype) << "\n";
  y << i1 << "wrap_policy:\n";
  if (p.wrap.kind == model::WrapPolicy::Kind::kSize) {
    y << i2 << "min_num_params: " << p.wrap.min_num_params << "\n";
  } else {
    y << i2 << "transformer_layer_cls_to_wrap: [" << Quote(ctx.layer_class) << "]\n";
  }
}

// The model keys verl's PPO (actor_rollout_ref.model) and SFT (model) sections share, at `indent`.
// `offload_key`: the trainer reads enable_activation_offload (the PPO workers and the FSDP engine
// of sft_trainer_engine.yaml; fsdp_sft_trainer.py never does).
void WriteModelKeys(const model::Plan& p, bool train, bool offload_key, const std::string& indent,
                    std::ostream& y) {
  y << indent << "enable_gradient_checkpointing: "
    << YamlBool(train && p.checkpointing != model::Checkpointing::kNone) << "\n";
  if (p.loss_kernel == model::LossKernel::kVerlPaddedCe ||
      (model::IsVerlFusedHead(p.loss_kernel) && p.padding_mask)) {
    y << indent << "use_remove_padding: false\n";  // the padded log-prob path (hf_model.yaml)
  }
  if (model::IsVerlFusedHead(p.loss_kernel)) {  // hf_model.yaml use_fused_kernels, its backend
    y << indent << "use_fused_kernels: true\n" << indent << "fused_kernel_options:\n"
      << indent << "  impl_backend: "
      << (p.loss_kernel == model::LossKernel::kVerlFusedTriton ? "triton" : "torch") << "\n";
  }
  if (p.liger.rms_norm && p.liger.swiglu && p.liger.rope) y << indent << "use_liger: true\n";
  if (offload_key && train && p.activation_offload == model::ActivationOffload::kVerlAsync) {
    y << indent << "enable_activation_offload: true\n";
  }
  y << indent << "lora_rank: " << (p.lora.enabled() ? p.lora.rank : 0) << "\n";
  if (p.lora.enabled()) {
    y << indent << "lora_alpha: " << FormatFloat(p.lora.alpha) << "\n";
    y << indent << "target_modules: [";
    for (size_t i = 0; i < p.lora.targets.size(); ++i) {
      y << (i ? ", " : "") << Quote(p.lora.targets[i]);
    }
    y << "]\n";
  }
  y << indent << "tiled_mlp:\n" << indent << "  enabled: " << YamlBool(p.tiled_mlp_shards > 1)
    << "\n" << indent << "  num_shards: " << (p.tiled_mlp_shards > 1 ? p.tiled_mlp_shards : 4)
    << "\n";
}

// verl's SFT trainer (verl/trainer/fsdp_sft_trainer.py over sft_trainer.yaml): the job of a
// training plan whose loss is a plain cross-entropy (the RL actor's is verl's log-prob path).
// data.train_batch_size is global; fsdp_sft_trainer divides it by dp and then by
// micro_batch_size_per_gpu (import_verl.cc ImportSft reads it back).
ExportResult ExportVerlSft(const model::Plan& p, const ExportContext& ctx, const Layout& l) {
  ExportResult r;
  r.notes = VerlNotes(p, ctx, l, true);
  AddActivationOffloadNote(p, "verl's fsdp_sft_trainer.py", &r.notes);
  int dp = p.DataParallel(ctx.world_size);
  std::ostringstream y;
  y << "defaults:\n  - sft_trainer\n  - _self_\n";
  y << "trainer:\n  nnodes: " << ctx.num_nodes << "\n  n_gpus_per_node: " << ctx.gpus_per_node
    << "\n";
  y << "data:\n  train_batch_size: " << static_cast<int64_t>(p.micro_batch) * p.grad_accum * dp
    << "  # sequences per step over all ranks\n";
  y << "  micro_batch_size_per_gpu: " << p.micro_batch << "\n";
  y << "  max_length: " << ctx.seq_len << "\n";
  y << "ulysses_sequence_parallel_size: " << p.cp << "\n";
  y << "model:\n  strategy: fsdp2\n";
  WriteModelKeys(p, true, false, "  ", y);
  WriteFsdpConfig(p, ctx, l, "  ", y);
  r.text = CommentedText(
      "verl SFT trainer config over sft_trainer.yaml: run torchrun -m "
      "verl.trainer.fsdp_sft_trainer --config-name THIS",
      p, ctx, r.notes, y.str());
  return r;
}

// verl's engine SFT trainer (python3 -m verl.trainer.sft_trainer over sft_trainer_engine.yaml;
// import_verl.cc ImportSftEngine reads it back): data.train_batch_size global, cut per rank by
// micro_batch_size_per_gpu or, for a packed plan, use_dynamic_bsz with max_token_len_per_gpu (the
// row over the Ulysses group, / sp); the FSDP keys and the Ulysses size under /engine.
ExportResult ExportVerlSftEngine(const model::Plan& p, const ExportContext& ctx, const Layout& l) {
  ExportResult r;
  r.notes = VerlNotes(p, ctx, l, true);
  const bool packed = p.packed_seq_len > 0;
  const PpoBatch batch = PpoBatchOf(p, ctx);  // sequences per step, packed rows counted at longest
  std::ostringstream y;
  y << "defaults:\n  - sft_trainer_engine\n  - _self_\n";
  y << "trainer:\n  nnodes: " << ctx.num_nodes << "\n  n_gpus_per_node: " << ctx.gpus_per_node
    << "  # not read: torchrun's --nnodes / --nproc-per-node set the world\n";
  y << "data:\n  train_batch_size: " << batch.sequences << "  # sequences per step over all ranks\n";
  if (packed) {
    y << "  use_dynamic_bsz: true\n  max_token_len_per_gpu: " << p.seq_len / std::max(1, p.cp) << "\n";
  } else {
    y << "  use_dynamic_bsz: false\n  micro_batch_size_per_gpu: " << p.micro_batch << "\n";
  }
  y << "  max_length: " << batch.seq << "\n";
  y << "model:\n";
  WriteModelKeys(p, true, true, "  ", y);
  WriteFsdpConfig(p, ctx, l, "", y, "engine");
  y << "  strategy: fsdp2\n  ulysses_sequence_parallel_size: " << p.cp << "\n";
  r.text = CommentedText(
      "verl engine SFT trainer config over sft_trainer_engine.yaml: run torchrun "
      "--nproc-per-node " + std::to_string(ctx.gpus_per_node) +
          " -m verl.trainer.sft_trainer --config-name THIS",
      p, ctx, r.notes, y.str());
  return r;
}

}  // namespace

// Keys read in volcengine/verl @b178a3c: verl/trainer/config/ppo_trainer.yaml and its parts
// (actor/actor.yaml ppo_mini_batch_size, ppo_micro_batch_size_per_gpu; ref/ref.yaml
// log_prob_micro_batch_size_per_gpu; engine/fsdp.yaml fsdp_config; model/hf_model.yaml
// enable_gradient_checkpointing, lora_rank, lora_alpha, target_modules, tiled_mlp; data
// max_prompt_length, max_response_length; trainer nnodes, n_gpus_per_node), and
// verl/workers/fsdp_workers.py (create_device_mesh: fsdp_size -1 is all ranks, else HSDP;
// ppo_mini_batch_size x rollout.n / (world / sp) per rank; mixed_precision; offload_policy).
ExportResult ExportVerl(const model::Plan& p, const ExportContext& ctx) {
  Layout l = ResolveLayout(p, ctx);
  bool train = p.role == model::Role::kTrain;
  if (train && ctx.verl_trainer == VerlTrainer::kSftEngine) return ExportVerlSftEngine(p, ctx, l);
  if (train && (ctx.verl_trainer == VerlTrainer::kSft || !model::IsVerlLogProbHead(p.loss_kernel))) {
    return ExportVerlSft(p, ctx, l);
  }
  ExportResult r;
  r.notes = VerlNotes(p, ctx, l, false);
  // A packed plan is verl's token budget (import_verl.cc): rows of seq_len tokens over the cp
  // group, sequences up to packed_seq_len.
  const bool packed = p.packed_seq_len > 0;
  const PpoBatch batch = PpoBatchOf(p, ctx);
  std::ostringstream y;
  // Hydra composes verl's own ppo_trainer.yaml first, then these keys over it.
  y << "defaults:\n  - ppo_trainer\n  - _self_\n";
  y << "trainer:\n  nnodes: " << ctx.num_nodes << "\n  n_gpus_per_node: " << ctx.gpus_per_node
    << "\n";
  y << "data:\n  max_prompt_length: " << batch.prompt
    << "\n  max_response_length: " << batch.seq - batch.prompt << "\n";
  y << "actor_rollout_ref:\n";
  y << "  model:\n";
  WriteModelKeys(p, train, true, "    ", y);
  const int64_t budget = p.seq_len / std::max(1, p.cp);  // *_max_token_len_per_gpu
  if (train) {
    y << "  rollout:\n    n: " << batch.n << "\n";
    y << "  actor:\n    strategy: fsdp2\n";
    // fsdp_workers.py: ppo_mini_batch_size (prompts) x rollout.n sequences per update.
    y << "    ppo_mini_batch_size: " << batch.sequences / batch.n
      << "  # prompts per update over all ranks\n";
    if (packed) {
      y << "    use_dynamic_bsz: true\n    ppo_max_token_len_per_gpu: " << budget << "\n";
    } else {
      y << "    ppo_micro_batch_size_per_gpu: " << p.micro_batch << "\n";
    }
  } else {
    y << "  ref:\n    strategy: fsdp2\n";
    if (packed) {
      y << "    log_prob_use_dynamic_bsz: true\n    log_prob_max_token_len_per_gpu: " << budget
        << "\n";
    } else {
      y << "    log_prob_micro_batch_size_per_gpu: " << p.micro_batch << "\n";
    }
  }
  y << "    ulysses_sequence_parallel_size: " << p.cp << "\n";
  WriteFsdpConfig(p, ctx, l, "    ", y);
  r.text = CommentedText(
      "verl PPO trainer config over ppo_trainer.yaml: copy it next to "
      "verl/trainer/config/ppo_trainer.yaml and run python3 -m "
      "verl.trainer.main_ppo --config-name THIS",
      p, ctx, r.notes, y.str());
  return r;
}

}  // namespace shardtune::configs::internal

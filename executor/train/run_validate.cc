// ValidateRun: every input problem of a run, found before any rank starts.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "executor/train/data.h"
#include "executor/train/run.h"
#include "executor/nn/transformer_support.h"
#include "model/errors.h"
#include "model/vision.h"
#include "model/expert_parallel.h"
#include "model/trainable.h"

namespace shardtune::exec {
namespace {

std::vector<std::string> PlanProblems(const RunOptions& o, int dp_world) {
  std::vector<std::string> p =
      o.plan.Problems(o.plan_name, dp_world, dp_world, o.spec.num_layers, o.spec.SeqLenLimit());
  const model::Plan& plan = o.plan;
  if (plan.optimizer != model::Optimizer::kAdamW && plan.optimizer != model::Optimizer::kSgd) {
    p.push_back("--optimizer: the executor runs adamw or sgd, got " +
                std::string(model::ToString(plan.optimizer)));
  }
  // Frozen prefixes and LoRA targets against the model's parameter names (model/trainable.h).
  for (std::string& f : model::TrainabilityProblems(
           o.spec, plan, plan.ResolvedSeqLen(o.spec.max_seq_len), o.plan_name)) {
    p.push_back(std::move(f));
  }
  if (!plan.Trains()) {
    p.push_back(o.plan_name + ":/role: expected train (the executor trains), got infer");
  }
  if (model::IsVerlLogProbHead(plan.loss_kernel)) {
    // verl's log-prob heads need flash-attn's in-place cross-entropy kernel or verl's fused
    // kernels; estimate, simulate and tune model them (model/activations.cc VerlFlashCeHead,
    // VerlPaddedCeHead, VerlFusedTorchHead, VerlFusedTritonHead).
    const bool padded = plan.loss_kernel == model::LossKernel::kVerlPaddedCe;
    const bool fused = model::IsVerlFusedHead(plan.loss_kernel);
    p.push_back(o.plan_name +
                ":/loss_kernel: expected cross_entropy or fused_linear (the executor's heads), got " +
                model::ToString(plan.loss_kernel) + " (verl's " + (padded ? "padded " : fused ? "fused " : "") +
                "log-prob head is estimated, not run: add --loss-kernel cross_entropy to train "
                "the plan with the executor's head)");
  }
  if (plan.loss_kernel == model::LossKernel::kTrlChunkedNll) {
    p.push_back(o.plan_name +
                ":/loss_kernel: expected cross_entropy or fused_linear (the executor's heads), got trl_chunked_nll "
                "(TRL's chunked NLL is estimated, not run: add --loss-kernel cross_entropy to train the plan with "
                "the executor's head)");
  }
  if (plan.loss_kernel == model::LossKernel::kTrlLogps || plan.reference != model::InStepReference::kNone) {
    p.push_back(o.plan_name + ":/" + (plan.reference != model::InStepReference::kNone ? "reference" : "loss_kernel") +
                ": expected none and cross_entropy (a DPO step, its reference forward and TRL's log-probs, is "
                "estimated, not run), got reference " + model::ToString(plan.reference) + " with loss_kernel " +
                model::ToString(plan.loss_kernel));
  }
  if (plan.liger.any()) {
    p.push_back(o.plan_name +
                ":/liger: expected no Liger kernels (the executor runs its own RMSNorm, SwiGLU and "
                "rotary; Liger's are estimated, not run), got " +
                std::string(plan.liger.rms_norm ? "rms_norm " : "") + (plan.liger.swiglu ? "swiglu " : "") +
                (plan.liger.rope ? "rope" : ""));
  }
  if (plan.wrap.sub_block_units) {
    p.push_back(o.plan_name +
                ":/wrap/sub_block_units: expected false (the executor's units are whole blocks; "
                "attention and MLP units per block are estimated, not run), got true");
  }
  if (plan.padding_mask) {
    p.push_back(o.plan_name +
                ":/padding_mask: expected false (the executor attends packed or equal-length "
                "sequences without flash-attn's unpad / pad copies), got true");
  }
  if (plan.master_dtype != model::DType::kFp32) {
    p.push_back("plan:/master_dtype: the executor keeps fp32 master shards, got " +
                std::string(model::ToString(plan.master_dtype)));
  }
  if (plan.lora.enabled() && plan.lora.dropout > 0) {
    // Equal losses for 1 and N ranks need each sequence's dropout masks to follow the sequence,
    // not the rank: not built. estimate/simulate/tune model the dropout's memory.
    p.push_back("--lora-dropout (plan:/lora/dropout): expected 0 (the executor has no LoRA dropout), got " +
                std::to_string(plan.lora.dropout));
  }
  if (plan.lora.enabled() && plan.lora.dtype == model::DType::kFp16) {
    p.push_back("--lora-dtype: fp16 is not supported on CPU (use fp32 or bf16)");
  }
  if (plan.param_dtype == model::DType::kFp16 || plan.reduce_dtype == model::DType::kFp16) {
    p.push_back("--precision/--reduce-dtype: fp16 is not supported on CPU (use bf16 or fp32)");
  }
  return p;
}

// `run --modeling torchtitan` (torchtitan_ops.h) and expert parallelism: what the executor runs
// of torchtitan's model code, and the ep layouts it builds.
std::vector<std::string> TorchtitanRunProblems(const RunOptions& o, int world_size) {
  std::vector<std::string> p;
  const model::Plan& plan = o.plan;
  const model::ModelSpec& s = o.spec;
  if (plan.modeling == model::Modeling::kTorchtitan) {
    auto refuse = [&](const std::string& what) {
      p.push_back("--modeling torchtitan: " + what + " (model " + s.name + "; use --modeling hf)");
    };
    // torchtitan's GPT-OSS normalises with its RMSNorm (models/gpt_oss/__init__.py), which the
    // executor runs; Gemma (1 + w) and OLMo 2 have no torchtitan model.
    if (s.norm_unit_offset || (s.norm_weight_fp32 && !s.moe.gpt_oss_experts)) {
      refuse("the executor runs torchtitan's RMSNorm (F.rms_norm); this model's norm (Gemma's 1 + w, "
             "OLMo 2's fp32 weight product) is not built in that form");
    }
    if (s.moe.enabled() && s.mlp_bias && !s.moe.gpt_oss_experts) {
      refuse("torchtitan's GroupedExperts have no biases");
    }
    if (plan.lora.enabled()) refuse("torchtitan has no LoRA adapters");
  }
  if (plan.ep <= 1) return p;
  int dp_world = o.emulate_world > 0 ? o.emulate_world : world_size;
  for (std::string& e : model::EpProblems(s, plan, o.plan_name)) p.push_back(std::move(e));
  if (plan.modeling != model::Modeling::kTorchtitan) {
    // EpProblems accepts --modeling hf as ROLL's ExpertParallel; the executor's dispatch is
    // torchtitan's (executor/README.md).
    p.push_back("--ep " + std::to_string(plan.ep) + ": expected --modeling torchtitan for shardtune "
                "run (ROLL's expert parallelism around transformers' experts, --modeling hf, is "
                "estimated, simulated and tuned, not run), got --modeling " +
                std::string(model::ToString(plan.modeling)));
  }
  if (plan.cp > 1) {
    p.push_back("--ep " + std::to_string(plan.ep) + ": expected --cp 1 for shardtune run (expert "
                "parallelism beside context parallelism is estimated, simulated and tuned, not run), "
                "got --cp " + std::to_string(plan.cp));
  }
  int shard = plan.ResolvedShardGroup(dp_world, dp_world);
  if (plan.cp <= 1 && (shard % plan.ep != 0)) {
    p.push_back("--ep: expected a divisor of the shard group size " + std::to_string(shard) +
                " (the ep ranks are consecutive ranks of one shard group), got " +
                std::to_string(plan.ep));
  }
  return p;
}

// Packed rows and --lengths: what the trainer (trainer.cc MicroBatches) and the transformer's
// packed attention (Transformer::SetPacking) run.
std::vector<std::string> PackingProblems(const RunOptions& o, int world) {
  std::vector<std::string> p;
  const model::Plan& plan = o.plan;
  const bool packed = plan.packed_seq_len > 0;
  const int dp = plan.DataParallel(world);
  const int64_t row = plan.ResolvedSeqLen(o.spec.max_seq_len);
  const int64_t longest = plan.AttentionSeqLen(row);
  if (o.lengths.uniform() && o.lengths.max_len > longest) {
    p.push_back("--lengths " + o.lengths.Describe(longest) + ": expected MAX at most the longest sequence " +
                std::to_string(longest));
  }
  if ((packed || o.lengths.uniform()) && plan.cp > 1) {
    p.push_back(std::string(packed ? "packed rows" : "--lengths") + " with --cp " + std::to_string(plan.cp) +
                ": expected --cp 1 for shardtune run (Ulysses over packed or padded variable-length "
                "sequences is estimated, not run)");
  }
  if (!packed) return p;
  if (o.spec.mla.enabled()) {
    p.push_back("packed rows: model " + o.spec.name + "'s multi-head latent attention is not run packed "
                "(estimate and simulate it; or drop --max-tokens-per-micro-batch)");
  }
  if (plan.micro_batch != 1) {
    p.push_back(o.plan_name + ":/micro_batch: expected 1 on a packed plan (one row of tokens), got " +
                std::to_string(plan.micro_batch));
  }
  if (o.sequences_per_step < 1 || o.sequences_per_step % dp != 0) {
    p.push_back("--global-batch: a packed plan needs the sequences per optimizer step, a multiple of the " +
                std::to_string(dp) + " data-parallel ranks, got " +
                (o.sequences_per_step < 1 ? std::string("none") : std::to_string(o.sequences_per_step)));
  }
  return p;
}

// A VL model's images run with fixed-length, unpacked sequences on every rank (the micro-batch's
// images are its sequences' own, Trainer::Images); what the tower does not run yet is named.
std::vector<std::string> VisionRunProblems(const RunOptions& o) {
  std::vector<std::string> p;
  const model::Plan& plan = o.plan;
  for (std::string& v : model::VisionProblems(o.spec, plan, o.plan_name)) p.push_back(std::move(v));
  if (!o.spec.vision.enabled()) return p;
  const std::string what = "model " + o.spec.name + "'s vision tower";
  if (plan.cp > 1) p.push_back("--cp " + std::to_string(plan.cp) + ": expected 1 for " + what + " (run does not split a VL model's sequences yet)");
  if (plan.packed_seq_len > 0) p.push_back("packed rows: " + what + " is not run packed yet (drop --max-tokens-per-micro-batch)");
  if (o.lengths.uniform()) p.push_back("--lengths: " + what + " runs fixed-length sequences only");
  if (model::AnySelectiveBlock(plan)) {
    p.push_back("--checkpointing " + model::CheckpointingSpecToString(plan) + ": " + what +
                "'s blocks are not run with selective recompute (use full, every:K or first:K)");
  }
  if (plan.modeling == model::Modeling::kTorchtitan) p.push_back("--modeling torchtitan: torchtitan has no " + what);
  if (plan.images > 0 && plan.image_tokens % plan.images != 0) {
    p.push_back(o.plan_name + ":/image_tokens: expected a multiple of the " + std::to_string(plan.images) +
                " images (run gives every image the same tokens), got " + std::to_string(plan.image_tokens));
  }
  return p;
}

void CheckOutDir(const std::string& dir, std::vector<std::string>* problems) {
  if (dir.empty()) {
    problems->push_back("--out: expected a folder, got nothing");
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    problems->push_back("--out: cannot create the folder \"" + dir +
                        "\": " + (ec ? ec.message() : "a file is in the way"));
    return;
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    problems->push_back("--out: \"" + dir + "\" is not writable: " + std::strerror(errno));
  }
}

}  // namespace

void ValidateRun(const RunOptions& o, int world_size) {
  std::vector<std::string> problems = o.spec.Problems("--model " + o.spec.name);
  if (problems.empty()) {
    std::string why = TransformerSupportProblem(o.spec);
    if (!why.empty()) problems.push_back("--model " + o.spec.name + ": " + why);
    // transformers applies Gemma 2's attention soft-capping in its eager attention only: its sdpa
    // path drops it (and warns to train Gemma 2 with eager), which would train another model.
    if (why.empty() && o.spec.attn_logit_softcap > 0 && o.plan.attention == model::Attention::kSdpa) {
      problems.push_back("--attention sdpa: " + o.spec.name + "'s attn_logit_softcapping (" +
                         std::to_string(o.spec.attn_logit_softcap) +
                         ") is applied by eager attention only (transformers' sdpa path drops "
                         "it); use --attention eager");
    }
    std::string ulysses = UlyssesProblem(o.spec, o.plan.cp);
    if (why.empty() && !ulysses.empty()) {
      problems.push_back(ulysses + " (model " + o.spec.name + ")");
    }
  }
  if (o.spec.moe.router_aux_loss) {
    // The auxiliary loss reads every MoE block's router logits at the head (a recomputed block
    // returns them as side outputs of its recompute node, recompute.h); a cp rank's loss is its
    // share of the group's, which HF's per-rank load_balancing_loss_func does not split.
    if (o.plan.cp > 1) {
      problems.push_back("--cp " + std::to_string(o.plan.cp) + ": expected 1 with the MoE auxiliary loss of " +
                         o.spec.name + " (output_router_logits)");
    }
  }
  if (o.plan.activation_offload != model::ActivationOffload::kNone) {
    // verl offloads what its layers save with no checkpointing or with its own reentrant full
    // checkpoint (activation_offload.py enable_activation_offloading); selective recompute's
    // dropped-and-refilled storages and op-level SAC's kept outputs (held by the checkpoint, not
    // saved through autograd's hooks, as torch.utils.checkpoint's SAC cache) are not copied
    // through it. So each offloaded block keeps everything or reruns whole; the blocks after them
    // (the one closing the last group included, whose tensors stay on the device) may run any
    // policy. A VL tower's blocks are FSDP layers of verl's too, which run's offload does not
    // group.
    const std::string what = std::string("--activation-offload ") + model::ActivationOffloadSpecToString(o.plan);
    const int offloaded = model::ActivationOffloadedBlocks(o.plan, o.spec.num_layers);
    for (int b = 0; b < offloaded; ++b) {
      if (!model::BlockSelective(o.plan, b, 0)) continue;
      problems.push_back(what + ": expected the offloaded blocks 0-" + std::to_string(offloaded - 1) +
                         " to keep everything or rerun whole (verl offloads beside none or full), got block " +
                         std::to_string(b) + " running selective recompute under --checkpointing " +
                         model::CheckpointingSpecToString(o.plan));
      break;
    }
    if (o.spec.VisionBlocks() > 0) {
      problems.push_back(what + ": run offloads a text model's blocks; " + o.spec.name +
                         " has a vision tower (estimate and simulate model it); expected none");
    }
  }
  for (std::string& p : VisionRunProblems(o)) problems.push_back(std::move(p));
  for (std::string& p : TorchtitanRunProblems(o, world_size)) problems.push_back(std::move(p));
  if (o.steps < 1)
    problems.push_back("--steps: expected an integer >= 1, got " + std::to_string(o.steps));
  if (o.emulate_world < 0) {
    problems.push_back("--emulate-world: expected an integer >= 1, got " +
                       std::to_string(o.emulate_world));
  }
  if (o.emulate_world > 0 && world_size > 1) {
    problems.push_back("--emulate-world: runs in one process, but " + std::to_string(world_size) +
                       " ranks were started (drop --nproc or --emulate-world)");
  }
  if (o.device != "cpu" && o.device != "cuda") {
    problems.push_back("--device: expected cpu or cuda, got '" + o.device + "'");
  } else if (o.device == "cuda" && !CudaRunsAvailable()) {
    problems.push_back(
        "--device cuda: this shardtune's LibTorch has no CUDA or no GPU is visible (build against "
        "a CUDA LibTorch, e.g. -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils."
        "cmake_prefix_path)'))");
  } else if (o.device == "cuda" && world_size > 1 && !NcclRunsAvailable()) {
    problems.push_back("--device cuda with " + std::to_string(world_size) +
                       " ranks: this shardtune was built without NCCL (no nccl.h found)");
  }
  if (o.keep_checkpoints < 0) {
    problems.push_back("--keep-checkpoints: expected an integer >= 0 (0: keep all), got " +
                       std::to_string(o.keep_checkpoints));
  }
  if (o.checkpoint_every < 0) {
    problems.push_back("--checkpoint-every: expected an integer >= 0, got " +
                       std::to_string(o.checkpoint_every));
  }
  if (!(o.lr > 0)) problems.push_back("--lr: expected a number > 0");
  if (!(o.timeout_s > 0)) problems.push_back("--timeout: expected seconds > 0");
  if (!(o.watchdog_timeout_s >= 0)) {
    std::ostringstream v;
    v << o.watchdog_timeout_s;
    problems.push_back("--watchdog-timeout: expected seconds >= 0 (0: no watchdog), got " + v.str());
  }
  if (o.export_full_state_dict && o.emulate_world > 0) {
    problems.push_back("--export-full-state-dict: an emulated world holds one rank's shards only "
                       "(hint: drop --emulate-world)");
  }
  int dp_world = o.emulate_world > 0 ? o.emulate_world : world_size;
  if (problems.empty()) {
    for (std::string& p : PlanProblems(o, dp_world)) problems.push_back(std::move(p));
  }
  if (problems.empty()) {
    for (std::string& p : PackingProblems(o, dp_world)) problems.push_back(std::move(p));
  }
  if (problems.empty()) {
    try {
      const int64_t row = o.plan.ResolvedSeqLen(o.spec.max_seq_len);
      TokenSource probe(DataOptions{o.data_path, o.seed, o.plan.AttentionSeqLen(row),
                                    o.spec.vocab_size});
    } catch (const InputError& e) {
      problems.push_back(e.what());
    }
  }
  CheckOutDir(o.out_dir, &problems);
  if (problems.empty()) return;
  std::string msg;
  for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
  throw InputError(msg);
}

model::Plan AsExecuted(model::Plan plan) {
  plan.checkpoint_reentrant = plan.checkpointing != model::Checkpointing::kNone;
  return plan;
}

}  // namespace shardtune::exec

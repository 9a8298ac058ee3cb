// The training step: micro-batches of the global batch, backward with or without gradient
// sync, clipping, optimizer, LR schedule, and the loss averaged over all ranks.
#include "executor/trainer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "executor/cuda_support.h"
#include "executor/errors.h"
#include "model/errors.h"

namespace shardtune::exec {

Trainer::Trainer(TrainerContext context)
    : ctx_(std::move(context)),
      seq_len_(ctx_.options.plan.ResolvedSeqLen(ctx_.options.spec.max_seq_len)),
      data_(DataOptions{ctx_.options.data_path, ctx_.options.seed, seq_len_,
                        ctx_.options.spec.vocab_size}) {
  const RunOptions& o = ctx_.options;
  RuntimeOptions ro;
  ro.plan = o.plan;
  ro.dp_world = ctx_.dp_world;
  ro.cp = o.plan.cp;
  ro.seed = o.seed;
  if (ctx_.cuda_device >= 0) ro.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(ctx_.cuda_device));
  runtime_ = std::make_unique<FsdpRuntime>(o.spec, ro, ctx_.groups, ctx_.recorder);
  std::vector<at::Tensor*> params, grads;
  for (FlatParam* u : runtime_->units()) {
    // Frozen flat parameters have no gradient and no optimizer state (FSDP2 and torch.optim
    // see only requires_grad parameters in a PEFT / freeze setup).
    opt_index_.push_back(u->trainable() ? static_cast<int>(params.size()) : -1);
    if (!u->trainable()) continue;
    params.push_back(&u->shard());
    grads.push_back(&u->grad_shard());
  }
  AdamWOptions adamw;
  adamw.weight_decay = o.weight_decay;
  adamw.fused = o.plan.optimizer_impl == model::OptimizerImpl::kFused;
  optimizer_ = std::make_unique<ShardedOptimizer>(o.plan.optimizer, adamw, params, grads);
  lr_.lr = o.lr;
  lr_.warmup_steps = o.warmup_steps >= 0 ? o.warmup_steps : o.steps / 10;
  lr_.total_steps = o.steps;
  lr_.schedule = o.lr_schedule;
}

Trainer::~Trainer() = default;

void Trainer::Message(const std::string& text) const {
  if (ctx_.rank == 0 && ctx_.callbacks.on_message) ctx_.callbacks.on_message(text);
}

int64_t Trainer::global_batch() const {
  return static_cast<int64_t>(ctx_.options.plan.micro_batch) * ctx_.options.plan.grad_accum *
         ctx_.dp_world;
}

at::Tensor Trainer::Batch(int64_t step, int micro, at::Tensor* labels) const {
  int64_t B = ctx_.options.plan.micro_batch, S = seq_len_;
  // Global sequence numbers: step-major, then micro-batch, then data-parallel rank, so the
  // global batch of a step is the same set for every world size and accumulation.
  int64_t first = (step - 1) * global_batch() + micro * ctx_.dp_world * B + ctx_.dp_rank * B;
  std::vector<int64_t> buf(static_cast<size_t>(B * (S + 1)));
  for (int64_t j = 0; j < B; ++j) data_.Sequence(first + j, buf.data() + j * (S + 1));
  at::Tensor all = at::from_blob(buf.data(), {B, S + 1}, at::kLong).clone();  // [B, S+1]
  // The next-token shift runs on the full sequence, then every cp rank keeps its contiguous
  // slice of inputs and labels: the label of a slice's last token is the next slice's first.
  int64_t cp = ctx_.options.plan.cp, s = S / cp, first_token = ctx_.cp_rank * s;
  *labels = all.narrow(1, 1 + first_token, s).contiguous();  // [B, S/cp]
  return all.narrow(1, first_token, s).contiguous();         // [B, S/cp]
}

StepLog Trainer::Step(int64_t step) {
  const model::Plan& plan = ctx_.options.plan;
  double t0 = MonotonicSeconds();
  at::Tensor loss_sum;  // on the loss's device: no host wait per micro-batch
  for (int m = 0; m < plan.grad_accum; ++m) {
    at::Tensor labels;
    at::Tensor tokens = Batch(step, m, &labels);
    if (ctx_.cuda_device >= 0) {
      auto dev = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(ctx_.cuda_device));
      tokens = tokens.to(dev, /*non_blocking=*/false);
      labels = labels.to(dev, /*non_blocking=*/false);
    }
    at::Tensor loss = runtime_->Forward(tokens, labels);
    bool last = m + 1 == plan.grad_accum;
    runtime_->Backward(loss, 1.0 / plan.grad_accum, /*sync=*/!plan.no_sync || last);
    at::Tensor detached = loss.detach().to(at::kDouble);
    loss_sum = loss_sum.defined() ? loss_sum + detached : detached;
    if (ctx_.watchdog) ctx_.watchdog->Progress();
  }
  StepLog log;
  log.step = step;
  log.steps = ctx_.options.steps;
  // The logged loss: mean over the global batch (all micro-batches of all ranks), reduced before
  // the update so that every rank takes the same decision on a non-finite step. With cp a
  // rank's loss is its share of its cp group's (Transformer::Segment): the world's sum counts
  // each data-parallel rank's full-sequence loss once, so it is divided by world / cp.
  at::Tensor loss =
      at::full({1}, loss_sum.item<double>() / plan.grad_accum, at::TensorOptions().dtype(at::kDouble));
  int world = ctx_.groups.world->size();
  if (world > 1) ctx_.groups.world->AllReduce(loss)->Wait();
  int cp_ranks = ctx_.groups.cp ? ctx_.groups.cp->size() : 1;
  // (One process emulating cp ranks, world 1, holds one share: scaled to a full loss.)
  log.loss = loss.item<double>() * cp_ranks / world;
  double t_opt = MonotonicSeconds();
  log.grad_norm = runtime_->ClipGradNorm(ctx_.options.max_grad_norm);  // global: same on all ranks
  log.lr = LearningRate(lr_, static_cast<int>(step));
  if (std::isfinite(log.loss) && std::isfinite(log.grad_norm)) {
    runtime_->UpdateExpertBias();  // torchtitan's optimizer step pre-hook (_update_expert_bias)
    optimizer_->Step(log.lr);
    runtime_->RefreshDeviceShards();  // ZeRO-Offload: updated params back to the GPU
  } else {
    std::ostringstream what;
    what << "step " << step << ": loss " << log.loss << ", gradient norm " << log.grad_norm
         << " on the global batch";
    if (ctx_.options.on_nonfinite == OnNonFinite::kStop) {
      throw BackendError(what.str() + "; stopping (--on-nonfinite stop), the last checkpoint is "
                                      "kept (hint: lower --lr, or --on-nonfinite skip)");
    }
    Message(what.str() + "; its update is skipped (--on-nonfinite skip)");
  }
  runtime_->ZeroGrad();
  if (ctx_.cuda_device >= 0) SynchronizeCuda(ctx_.cuda_device);  // the step's kernels are done
  double t1 = MonotonicSeconds();
  ctx_.recorder->Add({"optimizer", "optimizer", Lane::kStep, t_opt, t1 - t_opt});
  log.time_s = MonotonicSeconds() - t0;
  log.tokens = global_batch() * seq_len_;
  log.tokens_per_s = static_cast<double>(log.tokens) / std::max(1e-12, log.time_s);
  ctx_.recorder->Add({"step " + std::to_string(step), "step", Lane::kStep, t0, log.time_s});
  return log;
}

}  // namespace shardtune::exec

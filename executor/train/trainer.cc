// The training step: micro-batches of the global batch, backward with or without gradient
// sync, clipping, optimizer, LR schedule, and the loss averaged over all ranks.
#include "executor/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "executor/cuda_support.h"
#include "executor/errors.h"
#include "model/packing.h"
#include "model/errors.h"

namespace shardtune::exec {

Trainer::Trainer(TrainerContext context)
    : ctx_(std::move(context)),
      seq_len_(ctx_.options.plan.ResolvedSeqLen(ctx_.options.spec.max_seq_len)),
      longest_(ctx_.options.plan.AttentionSeqLen(seq_len_)),
      data_(DataOptions{ctx_.options.data_path, ctx_.options.seed, longest_,
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
  if (ctx_.options.plan.packed_seq_len > 0) return ctx_.options.sequences_per_step;
  return static_cast<int64_t>(ctx_.options.plan.micro_batch) * ctx_.options.plan.grad_accum *
         ctx_.dp_world;
}

bool Trainer::Classic() const {
  return ctx_.options.plan.packed_seq_len <= 0 && !ctx_.options.lengths.uniform();
}

int64_t Trainer::SequenceLength(int64_t index) const {
  return ctx_.options.lengths.Length(ctx_.options.seed, index, longest_);
}

std::vector<int64_t> Trainer::SequenceTokens(int64_t index, int64_t len) const {
  std::vector<int64_t> all(static_cast<size_t>(longest_ + 1));
  data_.Sequence(index, all.data());
  all.resize(static_cast<size_t>(len + 1));
  return all;
}

std::vector<Trainer::MicroBatch> Trainer::MicroBatches(int64_t step, int64_t* global_tokens) const {
  const model::Plan& plan = ctx_.options.plan;
  std::vector<MicroBatch> out;
  const int64_t G = global_batch(), first_of_step = (step - 1) * G;
  if (Classic()) {
    for (int m = 0; m < plan.grad_accum; ++m) {
      MicroBatch mb;
      mb.tokens = Batch(step, m, &mb.labels);
      const int64_t B = plan.micro_batch;
      mb.first_sequence = first_of_step + m * ctx_.dp_world * B + ctx_.dp_rank * B;
      mb.scale = 1.0 / plan.grad_accum;
      out.push_back(std::move(mb));
    }
    *global_tokens = G * seq_len_;
    return out;
  }
  // The step's lengths, drawn once: their sum is the loss's token count, and every rank's rows
  // are cut from them.
  std::vector<int64_t> lengths(static_cast<size_t>(G));
  int64_t total = 0;
  for (int64_t i = 0; i < G; ++i) total += lengths[static_cast<size_t>(i)] = SequenceLength(first_of_step + i);
  *global_tokens = total;
  const double dp = static_cast<double>(ctx_.dp_world);
  auto from_blob = [](std::vector<int64_t>& v, int64_t rows) {
    return at::from_blob(v.data(), {rows, static_cast<int64_t>(v.size()) / rows}, at::kLong).clone();
  };
  if (plan.packed_seq_len <= 0) {
    // Uniform lengths, unpacked: B sequences right-padded to S (pad token 0); the padding's
    // labels are -100, which cross-entropy ignores (HF's DataCollatorForLanguageModeling and
    // verl's response_mask), and causal attention keeps the real tokens from seeing it.
    const int64_t B = plan.micro_batch, S = seq_len_;
    for (int m = 0; m < plan.grad_accum; ++m) {
      int64_t first = first_of_step + m * ctx_.dp_world * B + ctx_.dp_rank * B;
      std::vector<int64_t> in(static_cast<size_t>(B * S), 0), lab(static_cast<size_t>(B * S), -100);
      int64_t counted = 0;
      for (int64_t j = 0; j < B; ++j) {
        int64_t len = lengths[static_cast<size_t>(first + j - first_of_step)];
        std::vector<int64_t> t = SequenceTokens(first + j, len);
        for (int64_t p = 0; p < len; ++p) {
          in[static_cast<size_t>(j * S + p)] = t[static_cast<size_t>(p)];
          lab[static_cast<size_t>(j * S + p)] = t[static_cast<size_t>(p + 1)];
        }
        counted += len;
      }
      MicroBatch mb;
      mb.tokens = from_blob(in, B);
      mb.labels = from_blob(lab, B);
      mb.scale = dp * static_cast<double>(counted) / static_cast<double>(total);
      out.push_back(std::move(mb));
    }
    return out;
  }
  // Packed: each data-parallel rank takes a contiguous G / dp of the step's sequences (verl's
  // DataProto.chunk over the dp ranks) and cuts them into token-budget rows as verl's
  // rearrange_micro_batches does, the count made equal over the ranks (model/packing.h). Every
  // rank computes every rank's count from the lengths, which are pure functions of the index,
  // instead of verl's all_reduce(MAX).
  const int64_t per_rank = G / ctx_.dp_world;
  auto lengths_of = [&](int r) {
    auto begin = lengths.begin() + r * per_rank;
    return std::vector<int64_t>(begin, begin + per_rank);
  };
  int count = 1;
  for (int r = 0; r < ctx_.dp_world; ++r) {
    count = std::max(count, model::PackedMicroBatchCount(lengths_of(r), seq_len_));
  }
  const std::vector<int64_t> mine = lengths_of(ctx_.dp_rank);
  const int64_t base = first_of_step + ctx_.dp_rank * per_rank;
  for (std::vector<int>& part : model::PackedMicroBatches(mine, count)) {
    // Longest first (stable): a run of equal lengths is attended as one batch (SetPacking).
    std::stable_sort(part.begin(), part.end(), [&](int a, int b) {
      return mine[static_cast<size_t>(a)] > mine[static_cast<size_t>(b)];
    });
    MicroBatch mb;
    std::vector<int64_t> in, lab;
    for (int i : part) {
      int64_t len = mine[static_cast<size_t>(i)];
      std::vector<int64_t> t = SequenceTokens(base + i, len);
      in.insert(in.end(), t.begin(), t.end() - 1);
      lab.insert(lab.end(), t.begin() + 1, t.end());
      mb.packing.push_back(len);
    }
    const double counted = static_cast<double>(in.size());
    mb.tokens = from_blob(in, 1);
    mb.labels = from_blob(lab, 1);
    mb.scale = dp * counted / static_cast<double>(total);
    out.push_back(std::move(mb));
  }
  return out;
}

ImageBatch Trainer::Images(int64_t first, int64_t B) const {
  const model::ModelSpec& spec = ctx_.options.spec;
  const model::Plan& plan = ctx_.options.plan;
  ImageBatch out;
  if (!spec.vision.enabled() || plan.images <= 0 || plan.image_tokens <= 0) return out;
  const model::VisionSpec& v = spec.vision;
  const int64_t S = seq_len_, per_image = plan.image_tokens / plan.images, m = v.spatial_merge_size;
  SHARDTUNE_CHECK(per_image * plan.images == plan.image_tokens && 1 + plan.image_tokens <= S)
      << "image tokens " << plan.image_tokens << " in " << plan.images << " images of a " << S << "-token sequence";
  int64_t gh = 1;
  for (int64_t d = 1; d * d <= per_image; ++d) {
    if (per_image % d == 0) gh = d;
  }
  const int64_t gw = per_image / gh;
  const int64_t kernel = v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size;
  const int64_t patches = gh * gw * m * m;
  std::vector<at::Tensor> pixels;
  at::Tensor mask = at::zeros({B, S}, at::TensorOptions().dtype(at::kBool));
  for (int64_t j = 0; j < B; ++j) {
    mask[j].narrow(0, 1, plan.image_tokens).fill_(true);
    for (int i = 0; i < plan.images; ++i) {
      const uint64_t key = (static_cast<uint64_t>(first + j) << 16) ^ static_cast<uint64_t>(i);
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(ctx_.options.seed * 1000003ull ^ key);
      pixels.push_back(at::randn({patches, kernel}, gen, at::TensorOptions().dtype(at::kFloat)));
      out.grids.push_back({gh * m, gw * m});
    }
  }
  out.pixel_values = at::cat(pixels, 0);
  out.image_mask = mask;
  if (!spec.mrope_section.empty()) out.position_ids = MropePositionIds(mask, out.grids, m);
  return out;
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
  int64_t global_tokens = 0;
  std::vector<MicroBatch> micro = MicroBatches(step, &global_tokens);
  const bool classic = Classic();
  for (size_t m = 0; m < micro.size(); ++m) {
    at::Tensor labels = micro[m].labels;
    at::Tensor tokens = micro[m].tokens;
    // The previous micro-batch's pixel values go first (its backward is over), then this one's
    // are made: one micro-batch's images at a time, as a trainer moves each micro-batch to the
    // device in turn.
    runtime_->transformer().SetImages({});
    ImageBatch images = Images(micro[m].first_sequence, tokens.size(0));
    if (ctx_.cuda_device >= 0) {
      auto dev = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(ctx_.cuda_device));
      tokens = tokens.to(dev, /*non_blocking=*/false);
      labels = labels.to(dev, /*non_blocking=*/false);
      if (!images.empty()) {
        images.pixel_values = images.pixel_values.to(dev);
        images.image_mask = images.image_mask.to(dev);
        if (images.position_ids.defined()) images.position_ids = images.position_ids.to(dev);
      }
    }
    runtime_->transformer().SetPacking(micro[m].packing);
    runtime_->transformer().SetImages(std::move(images));
    at::Tensor loss = runtime_->Forward(tokens, labels);
    bool last = m + 1 == micro.size();
    runtime_->Backward(loss, micro[m].scale, /*sync=*/!plan.no_sync || last);
    at::Tensor detached = loss.detach().to(at::kDouble);
    if (!classic) detached = detached * micro[m].scale;
    loss_sum = loss_sum.defined() ? loss_sum + detached : detached;
    if (ctx_.watchdog) ctx_.watchdog->Progress();
  }
  runtime_->transformer().SetPacking({});
  runtime_->transformer().SetImages({});
  StepLog log;
  log.step = step;
  log.steps = ctx_.options.steps;
  // The logged loss: mean over the global batch (all micro-batches of all ranks), reduced before
  // the update so that every rank takes the same decision on a non-finite step. With cp a
  // rank's loss is its share of its cp group's (Transformer::Segment): the world's sum counts
  // each data-parallel rank's full-sequence loss once, so it is divided by world / cp.
  // (Classic: the micro-batches' mean; else the scales already weigh each micro-batch's mean
  // by its share of the global batch's tokens, times dp.)
  at::Tensor loss = at::full({1}, classic ? loss_sum.item<double>() / plan.grad_accum : loss_sum.item<double>(),
                             at::TensorOptions().dtype(at::kDouble));
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
  log.tokens = global_tokens;
  log.tokens_per_s = static_cast<double>(log.tokens) / std::max(1e-12, log.time_s);
  ctx_.recorder->Add({"step " + std::to_string(step), "step", Lane::kStep, t0, log.time_s});
  return log;
}

}  // namespace shardtune::exec

// Names for program ops, streams and categories (reports and traces only).
#include "simulator/step_program.h"

namespace shardtune::sim {

const char* ToString(Stream s) {
  switch (s) {
    case Stream::kDefault: return "compute";
    case Stream::kAllGather: return "all-gather";
    case Stream::kReduceScatter: return "reduce-scatter";
    case Stream::kCopy: return "host copy";
    case Stream::kHost: return "host CPU";
    case Stream::kAllToAll:
      return "all-to-all (Ulysses cp, expert parallel)";
  }
  return "?";
}

const char* ToString(Category c) {
  switch (c) {
    case Category::kShardedParams: return "sharded parameters";
    case Category::kShardedGrads: return "sharded gradients";
    case Category::kOptimizerState: return "optimizer state";
    case Category::kOptimizerTemp: return "optimizer step temporaries";
    case Category::kGathered: return "gathered (unsharded) parameters";
    case Category::kAllGatherBuffers: return "all-gather buffers";
    case Category::kUnshardedGrads: return "unsharded gradients";
    case Category::kReduceScatterBuffers: return "reduce-scatter buffers";
    case Category::kNoSyncGrads: return "no_sync accumulated gradients";
    case Category::kActivations: return "activations saved for backward";
    case Category::kVisionActivations: return "vision tower activations";
    case Category::kReferenceParams: return "reference model shards";
    case Category::kReference: return "reference model forward";
    case Category::kWorkingSet: return "activation working set (temporaries, gradients)";
    case Category::kResidual: return "residual stream";
    case Category::kLoss: return "logits and loss";
    case Category::kWorkspaces: return "cuBLAS workspaces";
    case Category::kCount: break;
  }
  return "?";
}

const char* ToString(OpKind k) {
  switch (k) {
    case OpKind::kStartup: return "start-up";
    case OpKind::kAllGather: return "all-gather";
    case OpKind::kCopyOut: return "all-gather copy-out";
    case OpKind::kForward: return "forward";
    case OpKind::kBackward: return "backward";
    case OpKind::kReduceScatter: return "reduce-scatter";
    case OpKind::kAllReduce: return "replica all-reduce";
    case OpKind::kPostBackward: return "post-backward";
    case OpKind::kHostToDevice: return "host-to-device copy";
    case OpKind::kDeviceToHost: return "device-to-host copy";
    case OpKind::kOptimizer: return "optimizer step";
    case OpKind::kZeroGrad: return "zero_grad(set_to_none=True)";
    case OpKind::kAllToAll:
      return "all-to-all (Ulysses, expert parallel)";
  }
  return "?";
}

StepPoint StepProgram::OpPoint(size_t i) const {
  const ProgramOp& op = ops[i];
  StepPoint p;
  p.kind = op.kind;
  p.step = op.step;
  p.micro = op.micro;
  if (op.kind == OpKind::kForward || op.kind == OpKind::kBackward || op.kind == OpKind::kAllToAll) {
    if (op.segment == 0) {
      p.region = StepRegion::kEmbeddings;
    } else if (op.segment >= 1 && op.segment <= vision_blocks) {
      p.region = StepRegion::kVisionBlock;
      p.block = op.segment - 1;
    } else if (op.segment >= 1 && op.segment <= num_layers) {
      p.region = StepRegion::kBlock;
      p.block = op.segment - 1 - vision_blocks;
    } else if (op.segment == num_layers + 1) {
      p.region = StepRegion::kFinalNorm;
    } else {
      p.region = StepRegion::kHead;
    }
  } else if (op.unit >= 0 && static_cast<size_t>(op.unit) < unit_names.size()) {
    p.unit = op.unit;
  }
  return p;
}

std::string StepProgram::OpName(size_t i) const {
  const StepPoint p = OpPoint(i);
  if (p.kind == OpKind::kStartup) return "start-up · sharded parameters";
  std::string s = "step " + std::to_string(p.step);
  if (p.kind != OpKind::kOptimizer && p.kind != OpKind::kZeroGrad) {
    s += " · micro-batch " + std::to_string(p.micro + 1) + "/" + std::to_string(grad_accum);
  }
  s += std::string(" · ") + ToString(p.kind);
  switch (p.region) {
    case StepRegion::kEmbeddings: return s + " · embeddings";
    case StepRegion::kVisionBlock: return s + " · vision block " + std::to_string(p.block);
    case StepRegion::kBlock: return s + " · block " + std::to_string(p.block);
    case StepRegion::kFinalNorm: return s + " · final norm";
    case StepRegion::kHead: return s + " · LM head and loss";
    case StepRegion::kNone: break;
  }
  if (p.unit >= 0) s += " · " + unit_names[static_cast<size_t>(p.unit)];
  return s;
}

const char* PeakKindName(const StepPoint& p) {
  if (p.kind == OpKind::kOptimizer) return "optimizer step";
  if (p.region == StepRegion::kHead) return "LM head and loss";
  switch (p.kind) {
    case OpKind::kBackward: case OpKind::kPostBackward: return "backward";
    case OpKind::kForward: return "forward";
    case OpKind::kAllGather: case OpKind::kCopyOut: return "all-gather";
    case OpKind::kReduceScatter: return "reduce-scatter";
    case OpKind::kStartup: return "start-up";
    default: return "step";
  }
}

}  // namespace shardtune::sim

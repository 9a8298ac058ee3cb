// The "judged on" sentences (cli/report_words.h).
#include "cli/report_words.h"

#include <sstream>

#include "model/activations.h"

namespace shardtune::cli {

std::string BlockPolicyLine(const model::ModelSpec& spec, const model::Plan& plan) {
  std::string line = model::DescribeBlockPolicy(plan);
  const model::ActivationOptions o = model::ActivationOptionsFor(plan, plan.ResolvedSeqLen(spec.max_seq_len));
  if (spec.moe.enabled() && model::TorchtitanOpSacApplies(spec, o, model::Trainability{})) {
    line += " (in an MoE block w1, w3, w2 are the routed experts' grouped GEMMs; its router always reruns)";
  }
  return line;
}

std::string JudgedOnSentence(const sim::MemoryReport& r) {
  using sim::MemoryJudgedBy;
  const std::string percent = std::to_string(r.fragmentation_percent) + "% fragmentation allowance";
  switch (r.judged_by) {
    case MemoryJudgedBy::kCpuAllocator:
      return "peak allocated (tensor bytes through LibTorch's CPU allocator) + " + percent +
             " + the rank's process (libraries, allocator, Gloo) vs its share of this machine's RAM; the ranks "
             "together are judged against the whole machine under Host";
    case MemoryJudgedBy::kAllocatorReplay:
      return "the caching allocator replayed over every tensor of both steps "
             "(c10/cuda/CUDACachingAllocator.cpp: 2 MiB small-pool and 20 MiB or 2 MiB-rounded "
             "large-pool segments, best fit per stream, block splitting) in the device's usable "
             "memory less the memory outside the allocator (CUDA context, NCCL); a failed cudaMalloc "
             "frees the cached whole segments and retries, a second failure is the OOM "
             "(nvidia-smi shows reserved + outside)";
    case MemoryJudgedBy::kExpandablePages:
    case MemoryJudgedBy::kFragmentationAllowance:
      break;
  }
  std::ostringstream why;
  why << "peak allocated + "
      << (r.judged_by == MemoryJudgedBy::kExpandablePages
              ? std::string("expandable_segments page rounding (20 MiB pages per stream pool)")
              : percent)
      << " + memory outside the allocator (CUDA context, NCCL) vs the device's usable memory; "
         "the caching allocator frees its cache and retries before it raises OOM, so "
         "reserved-but-free memory does not count (nvidia-smi shows reserved + outside)";
  return why.str();
}

std::string JudgedOnSentence(const sim::ColocationReport& c) {
  std::string s = "the running role's required figure plus every idle role's residue (";
  s += c.per_role_offload        ? "each role's own offload between phases: offloaded states leave the GPU, "
                                   "others stay resident"
       : c.offload_between_roles ? "states offloaded to the host between phases"
                                 : "sharded parameters and optimizer state stay resident";
  s += c.separate_processes ? "; one process per role: each keeps its CUDA context and NCCL buffers"
                            : "; one process: one CUDA context shared";
  if (c.engines > 0) {
    s += c.engines == 1 ? "; the" : "; each";
    s += " inference engine in its own process: its share of the GPU while it runs, its context and CUDA "
         "graphs while it sleeps, and the trainer process's context and NCCL buffers beside it";
  }
  return s + ") vs the device's usable memory";
}

}  // namespace shardtune::cli

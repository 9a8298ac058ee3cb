// Measured kernel tables of one device (`shardtune probe`): GEMM, attention, memory-bound kernel,
// host-cost, host<->device copy and collective timings over the shapes a model issues. A profile
// (`--profile FILE`, "kernels" section) carries them; the simulator interpolates a kernel's time
// from them by shape and falls back to the catalog's datasheet peaks times the named
// efficiencies (simulator/cost_model.h) where a table has no sample of that kind.
// Plain data: the probe (executor/) fills it, the simulator reads it, neither includes the other.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/dtype.h"
#include "model/units.h"
#include "profiles/collective.h"

namespace shardtune::profiles {

// One GEMM C[m, n] = A[m, k] x B[k, n] in `dtype` (fp32 runs with TF32 allowed when `tf32`),
// timed as the median of its timed iterations after warm-up. FLOPs are 2·m·n·k.
struct GemmSample {
  model::DType dtype = model::DType::kBf16;
  bool tf32 = false;
  int64_t m = 0, n = 0, k = 0;
  Seconds time;
};

// Scaled dot-product attention forward and backward (q [batch, heads, seq, head_dim], k and v
// with kv_heads) through one backend ("flash", "efficient", "math", "cudnn" or "cpu").
struct AttentionSample {
  std::string backend;
  // The backend PyTorch's SDPA picked on its own for this shape (at::_fused_sdp_choice), as
  // opposed to one the probe forced. Profiles older than this flag leave it false everywhere.
  bool pytorch_default = false;
  model::DType dtype = model::DType::kBf16;
  int64_t batch = 1, seq_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = true;
  Seconds forward, backward;
};

// Memory-bound kernels the training step runs (their sources: simulator/cost_model.cc).
enum class MemoryKernel {
  kElementwise,            // out = a * b (two reads, one write)
  kCast,                   // dtype conversion (fp32 -> bf16 and back)
  kCopy,                   // device-to-device copy
  kAdamwForeach,           // torch._foreach AdamW over a list of tensors (params, grads, 2 moments)
  kAllGatherCopyIn,        // FSDP2 foreach_all_gather copy-in (torch.split_with_sizes_copy)
  kAllGatherCopyOut,       // FSDP2 foreach_all_gather_copy_out (split_with_sizes_copy to params)
  kReduceScatterChunkCat,  // FSDP2 foreach_reduce: torch._chunk_cat of the unsharded gradients
  kCrossEntropy,           // fp32 log-softmax + nll over [tokens, vocab], forward + backward
  // torch.optim.AdamW(foreach=True) over fp32 tensors in host memory, on the host's cores: the
  // optimizer step of FSDP2's CPUOffloadPolicy (timed on the CPU whatever the probe's device).
  kHostAdamwForeach,
};
inline constexpr int kNumMemoryKernels = 9;
const char* ToString(MemoryKernel k);
// The kernel named `name` (ToString's spelling), or nullopt.
std::optional<MemoryKernel> MemoryKernelFromString(const std::string& name);

// `bytes`: the kernel's size as the probe defines it per kernel (executor/probe/probe.h lists them;
// for plain elementwise kernels, bytes read plus bytes written), the key tables are looked up by.
struct MemoryKernelSample {
  MemoryKernel kernel = MemoryKernel::kElementwise;
  int64_t bytes = 0;
  Seconds time;
};

// Host (CPU) costs of eager execution, each the median per call.
struct HostCosts {
  std::optional<Seconds> kernel_launch;  // an empty op's launch with no work (GPU) / dispatch (CPU)
  std::optional<Seconds> op_dispatch;    // one ATen op through the dispatcher on a tiny tensor
  std::optional<Seconds> module_hook;    // a module forward with a pre- and post-hook, minus without
};

struct CopySample {
  bool host_to_device = true;
  bool pinned = true;
  int64_t bytes = 0;
  Seconds time;
};

// One collective over `ranks` processes of one backend ("nccl", "gloo"), total size S in bytes
// (nccl-tests convention: busbw = S / time x BusBwFactor(kind, ranks)).
struct CollectiveSample {
  Collective kind = Collective::kAllGather;
  std::string backend;
  int ranks = 2;
  int64_t bytes = 0;
  Seconds time;
};

struct KernelTables {
  std::vector<GemmSample> gemm;
  std::vector<AttentionSample> attention;
  std::vector<MemoryKernelSample> memory;
  HostCosts host;
  std::vector<CopySample> copies;
  std::vector<CollectiveSample> collectives;
  bool empty() const {
    return gemm.empty() && attention.empty() && memory.empty() && copies.empty() &&
           collectives.empty() && !host.kernel_launch && !host.op_dispatch && !host.module_hook;
  }
};

}  // namespace shardtune::profiles

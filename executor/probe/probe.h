// `shardtune probe`: measures the local device through LibTorch and returns the kernel tables a
// profile carries (profiles::KernelTables; the simulator interpolates them by shape,
// simulator/kernel_time.h). Torch-free interface; the measurements run in probe.cc.
//
// What each table's `bytes` counts (MemoryKernelSample), N elements of the kernel's tensors:
//   elementwise  out = a * b in the dtype:                  3 N e (two reads, one write)
//   cast         fp32 -> bf16 copy:                         6 N
//   copy         dst.copy_(src) in the dtype:               2 N e
//   adamw_foreach  AdamW as torch/optim/adam.py _multi_tensor_adam runs it (foreach lerp, mul,
//                addcmul, sqrt, div, add, addcdiv) over 8 fp32 tensors of N/8 elements: 16 N
//                (the param, grad and two moments it updates, each once)
//   all_gather_copy_in  FSDP2 foreach_all_gather's copy of 8 shards into one flat buffer
//                (torch.split_with_sizes_copy, _fsdp_collectives.py):        2 N e
//   all_gather_copy_out  the flat gathered buffer copied out to 8 parameters:  2 N e
//   reduce_scatter_chunk_cat  foreach_reduce's torch._chunk_cat of 8 unsharded gradients into
//                [world, -1] chunks (world 8; a cat of the chunks where _chunk_cat is missing):
//                2 N e
//   cross_entropy  HF's loss: bf16 logits [T, V] upcast to fp32, log_softmax, nll, forward and
//                backward: N = T·V, counted as 4 N (the fp32 logits' size)
//   host_adamw_foreach  adamw_foreach's ops on fp32 tensors in host memory, on the CPU whatever
//                the device (CPU offload's optimizer step): 16 N
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/dtype.h"
#include "model/model_spec.h"
#include "executor/rank_env.h"
#include "profiles/kernel_tables.h"

namespace shardtune::exec {

struct ProbeOptions {
  std::string device = "cpu";        // "cpu", or "cuda" (device `cuda_device`)
  int cuda_device = 0;
  model::ModelSpec spec;             // the model whose GEMM and attention shapes are timed
  std::vector<int64_t> tokens;       // GEMM rows (micro-batch x S / cp); empty: a default grid
  std::vector<model::DType> dtypes;  // empty: cpu {fp32}, cuda {bf16, fp32 with TF32}
  int threads = 0;                   // intra-op threads (0: LibTorch's default)
  // Stop adding samples once this much time has gone (each table keeps what it measured).
  double budget_s = 100;
  int warmup = 2, iters = 5;         // per sample: warm-up calls, then the median of `iters`
  std::function<void(const std::string&)> progress;  // one line per table (stderr in the CLI)
};

class Communicator;  // executor/comm/communicator.h

struct ProbeResult {
  profiles::KernelTables tables;
  std::string device_name;  // "cpu (AMD EPYC ...)" or cudaGetDeviceProperties' name
  std::string torch_version, cuda_version, driver_version, nccl_version;
  double elapsed_s = 0;
};

// Measures the tables on this process's device. Throws InputError for a bad option (unknown
// device, cuda without a GPU) and BackendError when LibTorch fails.
ProbeResult RunProbe(const ProbeOptions& options);

// Times all-gather, reduce-scatter, all-reduce and all-to-all over `world` (every member calls
// it with the same arguments) at total sizes from 64 KiB to `max_bytes` (x4 steps); the median
// over `iters` after a warm-up, as seen by this rank (nccl-tests' convention: S the total size).
std::vector<profiles::CollectiveSample> ProbeCollectives(Communicator& world,
                                                         const std::string& backend,
                                                         const std::string& device,
                                                         int cuda_device, int64_t max_bytes,
                                                         int iters);

// ProbeCollectives over every rank `shardtune probe --nproc N` launched (`world`, as their
// environment names them; `timeout_s` for the rendezvous and the collectives), on the
// communicator the device takes (NCCL on "cuda" with GPU `cuda_device`, Gloo on "cpu"), followed
// by a barrier: what `shardtune probe` runs before the kernels, so that cli/ builds no
// communicator itself (as `run` does not). Every rank calls it; each gets its own samples. Throws
// BackendError when the rendezvous or the backend fails.
std::vector<profiles::CollectiveSample> ProbeCollectivesOverWorld(const RankEnv& world,
                                                                  double timeout_s,
                                                                  const std::string& device,
                                                                  int cuda_device, int64_t max_bytes,
                                                                  int iters);

}  // namespace shardtune::exec

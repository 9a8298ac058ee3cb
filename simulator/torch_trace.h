// A PyTorch profiler trace (torch.profiler's export_chrome_trace / tensorboard_trace_handler JSON,
// written by Kineto: libkineto/src/output_json.cpp) reduced to what `calibrate --trace` fits, per
// profiler step: device time by kernel class, launches, host time blocked in synchronisation and
// spent in FSDP2's hooks. Then the fit: the cost model's efficiencies and host costs that make
// the simulator's step program of the same plan take the measured times.
//
// What is read (every other event and key is ignored):
//  - "ProfilerStep#N" spans (cat "user_annotation", "cpu_op" in older releases): prof.step()
//    marks them; a trace without them cannot be cut into steps and is refused.
//  - device activities: cat "kernel", "gpu_memcpy", "gpu_memset", with "dur" and
//    "args"."correlation", the id of the host runtime call that launched them.
//  - host runtime calls: cat "cuda_runtime" / "cuda_driver" with "args"."correlation"
//    (cudaLaunchKernel, cudaMemcpyAsync, cudaGraphLaunch, ...), and the blocking ones
//    (cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, cudaMemcpy).
//  - FSDP2's hook spans: record_function("FSDP::pre_forward (fqn)"), "FSDP::pre_backward (fqn)",
//    "FSDP::post_backward (fqn)" (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py).
// A device activity belongs to the step in which its launch call ran (the GPU may run it later).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/dtype.h"
#include "profiles/cluster.h"
#include "simulator/cost_model.h"
#include "simulator/step_program.h"

namespace shardtune::sim {

// Kernel classes by the names the libraries give their kernels: NCCL's "ncclKernel_*" /
// "ncclDevKernel_*"; attention from FlashAttention ("flash_fwd_kernel", "flash_bwd_*"),
// PyTorch's memory-efficient path ("fmha_cutlassF_*", "fmha_cutlassB_*") and cuDNN's SDPA
// ("*sdpa*", "*attention*"); GEMMs from cuBLAS and CUTLASS ("*gemm*", "nvjet_*", "*xmma*",
// "cublas*", "splitKreduce_kernel"); every other kernel, device-to-device copy and memset is
// memory-bound (elementwise, reductions, copies, optimizer, embedding); host<->device copies are
// their own class.
enum class KernelClass { kGemm, kAttention, kCommunication, kMemoryBound, kHostCopy };
KernelClass ClassifyKernel(const std::string& name);

struct TraceStep {
  int step = 0;       // N of ProfilerStep#N
  double wall_s = 0;  // the ProfilerStep#N span on the host
  // Device time of the activities launched in the step, summed over streams.
  double gemm_s = 0, attention_s = 0, memory_bound_s = 0, communication_s = 0, host_copy_s = 0;
  int64_t device_activities = 0;  // kernels, memcpys and memsets launched in the step
  int64_t launches = 0;           // host calls that launched them (one graph launch: many)
  double sync_s = 0;              // host time blocked in synchronising calls
  double launch_call_s = 0;       // host time inside the launch calls themselves
  double fsdp_hook_s = 0;         // FSDP2 pre-forward, pre-backward and post-backward hooks
  int64_t fsdp_hooks = 0;
};

struct TorchTrace {
  std::string path;
  std::string device;  // "deviceProperties"[0]."name" when the trace has it
  std::string date;    // YYYY-MM-DD (UTC) of "baseTimeNanoseconds", the trace's start, when present
  std::vector<TraceStep> steps;  // every ProfilerStep#N, in order
  // Per field, the median over the steps used: all but the first when there are three or more
  // (the first carries lazy initialisation and the optimizer's state creation).
  TraceStep typical;
  int steps_used = 0;
  std::vector<std::string> warnings;
};

// Reads `path`. Throws InputError naming the file and the JSON pointer of a bad event (a used
// event without a numeric "ts", a negative "dur", ...), or saying what is missing (no
// "traceEvents", no ProfilerStep#N span, no device activity: a trace recorded without
// ProfilerActivity.CUDA). Gzip-compressed traces are refused with the fix.
TorchTrace ReadTorchTrace(const std::string& path);
// The same from parsed JSON; `name` stands for the file in messages.
TorchTrace TorchTraceFromJson(const nlohmann::json& doc, const std::string& name);

// The simulator's work for one steady step of the traced plan: the step-1 ops of `program`
// (repeated micro-batches a walk left out counted as often as they run), GPU work only.
struct StepWork {
  double matmul_flops = 0, attention_flops = 0, memory_bytes = 0;
  int64_t host_kernels = 0, host_hooks = 0;
  // host_kernels by issuing thread (Python: forward and recomputation; the autograd engine:
  // backward), and the optimizer's parameter tensors (CostConstants' host terms).
  int64_t host_python_kernels = 0, host_autograd_kernels = 0, host_params = 0;
  bool fused_optimizer = false;  // host_params at host_per_fused_optimizer_param
  bool one_rank = false;         // hooks at host_per_fsdp_hook_one_rank
};
StepWork SteadyStepWork(const StepProgram& program, bool fused_optimizer = false, bool one_rank = false);

// One fitted constant, with the figures it came from.
struct TraceFitRow {
  std::string term;      // "matmul_efficiency", "host_per_kernel_s", ...
  double measured = 0;   // seconds per step from the trace
  double predicted = 0;  // seconds per step with the base constants
  double base = 0, fitted = 0;
  bool fitted_from_trace = false;  // false: the trace had no such work; base kept
};

struct TraceCalibration {
  CostConstants costs;  // base with the fitted constants replaced
  std::vector<TraceFitRow> rows;
  std::vector<std::string> warnings;
};

// Each term has one unknown and one equation per step (the median step):
//  - compute: efficiency = work / (peak x measured time), peak the dense tensor-core peak of
//    `dtype` for GEMMs and attention and the HBM bandwidth for memory-bound bytes (the same
//    ComputeTime terms the simulator charges);
//  - host: the hook constant of the plan's mesh (host_per_fsdp_hook, or _one_rank) = the hooks'
//    measured time / their count; the host's busy time (the step's wall time less its blocking
//    calls) less the modelled hooks' time is the kernels' and the optimizer's: one equation, so
//    one unknown, a factor on host_per_kernel, host_per_backward_kernel and the optimizer's
//    per-parameter costs together (a trace cannot tell the threads' rates apart; their ratios
//    stay the measured ones of cost_model.h).
// Terms without work in the trace or the program keep `base`'s values, with a warning.
TraceCalibration CalibrateFromTrace(const TorchTrace& trace, const StepWork& work,
                                    const profiles::GpuSpec& gpu, model::DType dtype,
                                    const CostConstants& base);

}  // namespace shardtune::sim

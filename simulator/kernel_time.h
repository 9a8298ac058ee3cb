// Kernel times read from a measured device profile (profiles::KernelTables, written by
// `shardtune probe`): the GEMMs, attention and memory-bound kernels a plan's step runs, timed by
// shape instead of one datasheet efficiency for every shape. Where the tables hold no sample of a
// kind, the catalog's datasheet peaks times CostConstants' named efficiencies stay in force.
//
// Interpolation (stated so a reader can check a prediction by hand):
//  - GEMM: the achieved FLOP/s of the samples of the same dtype (fp32: those with TF32 when
//    `allow_tf32`, where the table has fp32 samples with and without it), weighted by inverse squared distance in (log2 m, log2 n, log2 k) over the four
//    nearest samples (an exact match takes its own). Conservative at the edges: a shape beyond
//    every sample reaches no more than its nearest samples' throughput (no extrapolated gain), and
//    one with fewer FLOPs than every sample takes no less time than the smallest sample (the
//    launch-bound floor).
//  - Memory-bound kernels: piecewise linear in log2(bytes) over that kernel's samples, of the
//    achieved bandwidth; above the largest sample its bandwidth, below the smallest its time.
//  - Attention (forward + backward): as GEMMs, over (log2 batch x heads, log2 seq, log2 head_dim)
//    of the samples of the same dtype, on 4·b·h·s²·d forward FLOPs (halved when causal) and twice
//    that backward (FlashAttention-2, Dao 2023, section 3.1: backward = 2.5x forward with
//    recomputation; our FLOP model counts 2x and the measured time carries the rest).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/gemm_shapes.h"
#include "model/model_spec.h"
#include "model/plan.h"
#include "profiles/hardware.h"
#include "profiles/kernel_tables.h"
#include "simulator/cost_model.h"

namespace shardtune::sim {

std::optional<Seconds> GemmTime(const profiles::KernelTables& t, model::DType dtype,
                                bool allow_tf32, const model::GemmShape& s);
std::optional<Seconds> MemoryKernelTime(const profiles::KernelTables& t,
                                        profiles::MemoryKernel kernel, int64_t bytes);
// Forward + backward of one attention call over q [batch, heads, seq, head_dim], from the rows
// of `backend` ("flash", "cudnn", ...; none: nullopt), or, with backend "", from the rows of the
// backend PyTorch picked itself (AttentionSample::pytorch_default; every row of the dtype in a
// profile that marks none).
std::optional<Seconds> AttentionTime(const profiles::KernelTables& t, model::DType dtype,
                                     int64_t batch, int64_t seq_len, int64_t heads,
                                     int64_t head_dim, const std::string& backend = "");

// The cost constants one plan runs with. With measured tables in `k.tables`:
//  - matmul_efficiency: FLOP-weighted over the micro-batch's GEMMs (BlockForwardGemms x layers,
//    the head, each forward and backward) of the interpolated times, over the dtype's peak;
//  - attention_efficiency: the attention table at the plan's (micro-batch, S / cp, heads,
//    head_dim), over the same peak;
//  - memory_efficiency: the elementwise kernel's bandwidth at the probe's largest footprint (the
//    HBM streaming rate: smaller footprints read back from the L2 in the probe's repeated timing)
//    over the GPU's memory bandwidth;
//  - host_per_kernel: on CPU ranks the measured dispatch cost; a GPU job's stays k's (its host
//    issues from Python, the probe from C++).
// Terms without samples keep k's values. Without tables, k itself.
CostConstants EffectiveConstants(const CostConstants& k, const model::ModelSpec& spec,
                                 const model::Plan& plan, int64_t seq_len,
                                 const profiles::GpuSpec& gpu);
// The constants to cost `plan` with: `k` itself when it holds no tables (no copy: the planner
// calls this for every plan), else EffectiveConstants stored in `*storage`. Sequence length:
// plan.ResolvedSeqLen(spec.max_seq_len).
const CostConstants& PlanConstants(const CostConstants& k, const model::ModelSpec& spec,
                                   const model::Plan& plan, const profiles::GpuSpec& gpu,
                                   CostConstants* storage);

}  // namespace shardtune::sim

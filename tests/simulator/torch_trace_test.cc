// `calibrate --trace`: a PyTorch profiler trace cut into steps, its kernels classed, and the
// cost model's constants fitted so the simulator's step program takes the measured times. The
// traces are written here event by event in Kineto's format (libkineto/src/output_json.cpp), so
// every expected figure follows from the events the test wrote.
#include "simulator/torch_trace.h"

#include <cmath>
#include <fstream>

#include <gtest/gtest.h>

#include "model/errors.h"
#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/simulate.h"

namespace shardtune::sim {
namespace {

using nlohmann::json;

// Builds a trace: host events on thread 1, device activities on stream 7; times in microseconds.
struct TraceBuilder {
  json events = json::array();
  int64_t correlation = 100;

  void Step(int n, double ts, double dur) {
    events.push_back({{"ph", "X"}, {"cat", "user_annotation"}, {"name", "ProfilerStep#" + std::to_string(n)},
                      {"pid", 1}, {"tid", 1}, {"ts", ts}, {"dur", dur}});
  }
  void Host(const std::string& cat, const std::string& name, double ts, double dur) {
    events.push_back({{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", 1}, {"tid", 1}, {"ts", ts}, {"dur", dur}});
  }
  // A launch call at host_ts and the activity it launched at dev_ts.
  void Launch(double host_ts, const std::string& kernel, double dev_ts, double dur,
              const std::string& cat = "kernel", double call_dur = 4) {
    int64_t c = ++correlation;
    events.push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaLaunchKernel"}, {"pid", 1},
                      {"tid", 1}, {"ts", host_ts}, {"dur", call_dur}, {"args", {{"correlation", c}}}});
    events.push_back({{"ph", "X"}, {"cat", cat}, {"name", kernel}, {"pid", 0}, {"tid", 7}, {"ts", dev_ts},
                      {"dur", dur}, {"args", {{"correlation", c}, {"device", 0}, {"stream", 7}}}});
  }
  json Doc() const { return {{"schemaVersion", 1}, {"traceEvents", events}}; }
};

const char* kGemm = "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT";
const char* kFlash = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Flash_fwd_params)";
const char* kElementwise = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>";
const char* kNccl = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)";

// One step of known content starting at `t0`: 2 GEMMs of 100 us, one flash kernel of 50 us,
// three elementwise kernels of 10 us, one NCCL kernel of 200 us, a 30 us host-to-device copy, a
// 5 us memset; a 400 us synchronize; two FSDP hooks of 1 ms and a nested non-hook FSDP span.
void AddStep(TraceBuilder* b, int n, double t0) {
  b->Step(n, t0, 10000);
  double h = t0 + 10, d = t0 + 50;
  for (int i = 0; i < 2; ++i, h += 10, d += 100) b->Launch(h, kGemm, d, 100);
  b->Launch(h, kFlash, d, 50);
  h += 10, d += 50;
  for (int i = 0; i < 3; ++i, h += 10, d += 10) b->Launch(h, kElementwise, d, 10);
  b->Launch(h, kNccl, d, 200);
  h += 10, d += 200;
  b->Launch(h, "Memcpy HtoD (Pinned -> Device)", d, 30, "gpu_memcpy");
  h += 10, d += 30;
  b->Launch(h, "Memset (Device)", d, 5, "gpu_memset");
  b->Host("user_annotation", "FSDP::pre_forward (model.layers.0)", t0 + 1000, 1000);
  b->Host("user_annotation", "FSDP::all_gather_copy_out", t0 + 1100, 300);  // nested: not a hook
  b->Host("user_annotation", "FSDP::post_backward (model.layers.0)", t0 + 3000, 1000);
  b->Host("cuda_runtime", "cudaDeviceSynchronize", t0 + 9000, 400);
}

TEST(TorchTraceTest, StepsCollectTheirKernelsByClass) {
  TraceBuilder b;
  for (int n = 0; n < 4; ++n) AddStep(&b, n, 100000.0 * (n + 1));
  TorchTrace t = TorchTraceFromJson(b.Doc(), "t.json");
  ASSERT_EQ(t.steps.size(), 4u);
  EXPECT_EQ(t.steps_used, 3);  // the first step is warm-up
  for (const TraceStep& s : t.steps) {
    EXPECT_NEAR(s.wall_s, 10000e-6, 1e-12);
    EXPECT_NEAR(s.gemm_s, 200e-6, 1e-12);
    EXPECT_NEAR(s.attention_s, 50e-6, 1e-12);
    EXPECT_NEAR(s.memory_bound_s, 30e-6 + 5e-6, 1e-12);  // elementwise + memset
    EXPECT_NEAR(s.communication_s, 200e-6, 1e-12);
    EXPECT_NEAR(s.host_copy_s, 30e-6, 1e-12);
    EXPECT_EQ(s.device_activities, 9);
    EXPECT_EQ(s.launches, 9);
    EXPECT_NEAR(s.launch_call_s, 9 * 4e-6, 1e-12);
    EXPECT_NEAR(s.sync_s, 400e-6, 1e-12);
    EXPECT_NEAR(s.fsdp_hook_s, 2000e-6, 1e-12);
    EXPECT_EQ(s.fsdp_hooks, 2);
  }
  EXPECT_NEAR(t.typical.gemm_s, 200e-6, 1e-12);
  EXPECT_TRUE(t.warnings.empty());
}

// The GPU runs behind the host: a kernel launched in step 0 but running during step 1's host
// span belongs to step 0.
TEST(TorchTraceTest, ActivitiesBelongToTheStepThatLaunchedThem) {
  TraceBuilder b;
  b.Step(0, 0, 1000);
  b.Step(1, 1000, 1000);
  b.Launch(900, kGemm, 1500, 300);
  b.Launch(1100, kElementwise, 1900, 20);
  TorchTrace t = TorchTraceFromJson(b.Doc(), "t.json");
  EXPECT_NEAR(t.steps[0].gemm_s, 300e-6, 1e-12);
  EXPECT_NEAR(t.steps[1].gemm_s, 0, 1e-12);
  EXPECT_NEAR(t.steps[1].memory_bound_s, 20e-6, 1e-12);
  ASSERT_EQ(t.warnings.size(), 1u);  // fewer than three steps
}

TEST(TorchTraceTest, KernelNamesOfTheLibrariesAreClassed) {
  for (const char* n : {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1",
                        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", kGemm,
                        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>",
                        "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>"}) {
    EXPECT_EQ(ClassifyKernel(n), KernelClass::kGemm) << n;
  }
  for (const char* n : {kFlash, "fmha_cutlassB_bf16_aligned_64x64_k128_sm80",
                        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128"}) {
    EXPECT_EQ(ClassifyKernel(n), KernelClass::kAttention) << n;
  }
  EXPECT_EQ(ClassifyKernel(kNccl), KernelClass::kCommunication);
  EXPECT_EQ(ClassifyKernel("ncclKernel_ReduceScatter_RING_LL_Sum_float"), KernelClass::kCommunication);
  EXPECT_EQ(ClassifyKernel("Memcpy DtoH (Device -> Pinned)"), KernelClass::kHostCopy);
  EXPECT_EQ(ClassifyKernel("Memcpy DtoD (Device -> Device)"), KernelClass::kMemoryBound);
  EXPECT_EQ(ClassifyKernel(kElementwise), KernelClass::kMemoryBound);
  EXPECT_EQ(ClassifyKernel("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>"),
            KernelClass::kMemoryBound);
}

// Each constant is the one unknown of its equation: the measured times are written from chosen
// "true" constants and the work, and the fit returns those constants.
TEST(TorchTraceTest, FitRecoversTheConstantsTheTimesCameFrom) {
  auto gpu = profiles::ParseClusterShorthand("1xH100").gpu;
  StepWork w;
  w.matmul_flops = 4e13;
  w.attention_flops = 5e12;
  w.memory_bytes = 6e10;
  w.host_kernels = 3000;
  w.host_python_kernels = 3000;  // all issued from Python (no backward or optimizer here)
  w.host_hooks = 48;
  const double e_mm = 0.62, e_att = 0.41, e_mem = 0.73, per_kernel = 7e-6, per_hook = 0.8e-3;
  double peak = gpu.bf16_dense.count(), bw = gpu.memory_bandwidth.count();
  TorchTrace t;
  t.typical.gemm_s = w.matmul_flops / (peak * e_mm);
  t.typical.attention_s = w.attention_flops / (peak * e_att);
  t.typical.memory_bound_s = w.memory_bytes / (bw * e_mem);
  t.typical.fsdp_hooks = 50;  // the trace may count other hooks than the model: its own mean
  t.typical.fsdp_hook_s = 50 * per_hook;
  t.typical.sync_s = 0.05;
  t.typical.wall_s = t.typical.sync_s + 3000 * per_kernel + 48 * per_hook;
  TraceCalibration c = CalibrateFromTrace(t, w, gpu, model::DType::kBf16, CostConstants{});
  EXPECT_NEAR(c.costs.matmul_efficiency, e_mm, 1e-9);
  EXPECT_NEAR(c.costs.attention_efficiency, e_att, 1e-9);
  EXPECT_NEAR(c.costs.memory_efficiency, e_mem, 1e-9);
  EXPECT_NEAR(c.costs.host_per_fsdp_hook.count(), per_hook, 1e-12);
  EXPECT_NEAR(c.costs.host_per_kernel.count(), per_kernel, 1e-12);
  for (const auto& r : c.rows) EXPECT_TRUE(r.fitted_from_trace) << r.term;
}

TEST(TorchTraceTest, TermsWithoutWorkKeepTheirBaseAndSaySo) {
  auto gpu = profiles::ParseClusterShorthand("1xH100").gpu;
  StepWork w;
  w.matmul_flops = 1e12;
  w.host_kernels = 10;
  w.host_python_kernels = 10;
  TorchTrace t;
  t.typical.gemm_s = 0.002;
  t.typical.wall_s = 0.01;
  CostConstants base;
  TraceCalibration c = CalibrateFromTrace(t, w, gpu, model::DType::kBf16, base);
  EXPECT_EQ(c.costs.attention_efficiency, base.attention_efficiency);
  EXPECT_EQ(c.costs.memory_efficiency, base.memory_efficiency);
  EXPECT_EQ(c.costs.host_per_fsdp_hook.count(), base.host_per_fsdp_hook.count());
  EXPECT_GE(c.warnings.size(), 2u);
}

// The loop closed: a plan simulated with "true" constants gives per-class times; a trace with
// those times, fitted from the default constants, gives back the true constants, and the plan
// simulated with the fitted profile takes the same step time as with the true one.
TEST(TorchTraceTest, FittedProfileReproducesTheStepTheTraceCameFrom) {
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto cluster = profiles::ParseClusterShorthand("1xH100");
  model::Plan p;
  p.seq_len = 1024;
  p.micro_batch = 2;
  SimOptions truth;
  truth.costs.matmul_efficiency = 0.65;
  truth.costs.attention_efficiency = 0.45;
  truth.costs.memory_efficiency = 0.7;
  // The host terms' rates in the ratios cost_model.h measured, at half their value: the trace's
  // one host equation recovers that factor (CalibrateFromTrace).
  const CostConstants base;
  truth.costs.host_per_kernel = Seconds::Of(0.5 * base.host_per_kernel.count());
  truth.costs.host_per_backward_kernel = Seconds::Of(0.5 * base.host_per_backward_kernel.count());
  truth.costs.host_per_optimizer_param = Seconds::Of(0.5 * base.host_per_optimizer_param.count());
  truth.costs.host_per_fsdp_hook_one_rank = Seconds::Micros(600);  // 1xH100: a one-rank mesh
  SimReport want = SimulateStep(spec, cluster, p, truth);
  StepWork w = SteadyStepWork(want.program, /*fused_optimizer=*/false, /*one_rank=*/true);
  ASSERT_GT(w.matmul_flops, 0);
  ASSERT_GT(w.host_hooks, 0);
  double peak = cluster.gpu.bf16_dense.count(), bw = cluster.gpu.memory_bandwidth.count();
  TorchTrace t;
  t.typical.gemm_s = w.matmul_flops / (peak * 0.65);
  t.typical.attention_s = w.attention_flops / (peak * 0.45);
  t.typical.memory_bound_s = w.memory_bytes / (bw * 0.7);
  t.typical.fsdp_hooks = w.host_hooks;
  t.typical.fsdp_hook_s = static_cast<double>(w.host_hooks) * 600e-6;
  ASSERT_LT(w.host_python_kernels + w.host_autograd_kernels, w.host_kernels);  // less the optimizer's
  ASSERT_GT(w.host_autograd_kernels, 0);
  ASSERT_GT(w.host_params, 0);
  t.typical.wall_s = static_cast<double>(w.host_python_kernels) * truth.costs.host_per_kernel.count() +
                     static_cast<double>(w.host_autograd_kernels) * truth.costs.host_per_backward_kernel.count() +
                     static_cast<double>(w.host_params) * truth.costs.host_per_optimizer_param.count() +
                     t.typical.fsdp_hook_s;
  TraceCalibration c = CalibrateFromTrace(t, w, cluster.gpu, p.param_dtype, CostConstants{});
  SimOptions fitted;
  fitted.costs = c.costs;
  SimReport got = SimulateStep(spec, cluster, p, fitted);
  EXPECT_NEAR(got.step_time.count(), want.step_time.count(), want.step_time.count() * 1e-6);
}

void ExpectError(const json& doc, const std::string& part) {
  try {
    TorchTraceFromJson(doc, "t.json");
    ADD_FAILURE() << "no error for " << doc.dump().substr(0, 200);
  } catch (const InputError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(part), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(TorchTraceTest, BadTracesAreOneLineErrorsNamingWhere) {
  ExpectError(json::object({{"x", 1}}), "t.json: expected a Chrome trace");
  ExpectError(json::object({{"traceEvents", 3}}), "t.json:/traceEvents: expected an array");
  TraceBuilder no_steps;
  no_steps.Launch(10, kGemm, 20, 5);
  ExpectError(no_steps.Doc(), "no \"ProfilerStep#N\" span");
  TraceBuilder no_kernels;
  no_kernels.Step(0, 0, 100);
  ExpectError(no_kernels.Doc(), "no GPU kernel");
  TraceBuilder negative;
  negative.Step(0, 0, 100);
  negative.Launch(10, kGemm, 20, -5);
  ExpectError(negative.Doc(), "t.json:/traceEvents/2/dur: expected a number >= 0, got -5");
  TraceBuilder not_object;
  not_object.Step(0, 0, 100);
  not_object.events.push_back(7);
  ExpectError(not_object.Doc(), "t.json:/traceEvents/1: expected an event object");
  TraceBuilder two_devices;
  two_devices.Step(0, 0, 100);
  two_devices.Launch(10, kGemm, 20, 5);
  two_devices.Launch(30, kGemm, 40, 5);
  two_devices.events.back()["args"]["device"] = 1;
  ExpectError(two_devices.Doc(), "kernels of 2 devices");
  TraceBuilder bad_step;
  bad_step.Step(0, 0, 100);
  bad_step.events.back()["name"] = "ProfilerStep#x";
  ExpectError(bad_step.Doc(), "expected \"ProfilerStep#<step>\"");
  try {
    ReadTorchTrace("/nonexistent/trace.json.gz");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("gunzip it first"), std::string::npos);
  }
}

}  // namespace
}  // namespace shardtune::sim

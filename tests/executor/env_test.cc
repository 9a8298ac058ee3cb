// `shardtune env` and the BLAS detection behind it: the library LibTorch really bound is named,
// classified and timed; a CPU run records it in measurements.json and warns iff it is the
// reference BLAS; the light `shardtune` hands `env` to shardtune-exec.
#include <dlfcn.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "executor/probe/blas_info.h"
#include "executor/cuda_support.h"
#include "executor/probe/env_report.h"
#include "executor/comm/gloo_communicator.h"
#include "executor/host_info.h"
#include "tests/executor/test_util.h"

namespace shardtune::exec::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

TEST(BlasInfoTest, DebianAlternativesPathsAndVendorEntryPointsClassify) {
  const std::string ref = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0";
  const std::string ob = "/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3";
  EXPECT_EQ(ClassifyBlas(ref, false, false, false, false), BlasVendor::kReference);
  EXPECT_EQ(
      ClassifyBlas("/usr/lib/x86_64-linux-gnu/atlas/libblas.so.3", false, false, false, false),
      BlasVendor::kAtlas);
  // The entry points decide over the path: an OpenBLAS installed under any name.
  EXPECT_EQ(ClassifyBlas(ref, true, false, false, false), BlasVendor::kOpenBlas);
  EXPECT_EQ(ClassifyBlas(ob, false, false, false, false), BlasVendor::kOpenBlas);
  EXPECT_EQ(ClassifyBlas("/opt/intel/libmkl_rt.so.2", false, true, false, false), BlasVendor::kMkl);
  EXPECT_EQ(ClassifyBlas("/usr/lib/libblis.so.4", false, false, true, false), BlasVendor::kBlis);
  EXPECT_EQ(ClassifyBlas("/usr/lib/libflexiblas.so.3", true, false, false, true),
            BlasVendor::kFlexiBlas);
  EXPECT_EQ(ClassifyBlas("/somewhere/libfoo.so", false, false, false, false), BlasVendor::kUnknown);
}

TEST(BlasInfoTest, OnlyTheReferenceBlasOrNoneIsWarnedAbout) {
  BlasInfo ref;
  ref.found = true;
  ref.library = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0";
  ref.vendor = BlasVendor::kReference;
  EXPECT_THAT(SlowBlasWarning(ref), HasSubstr(ref.library));
  EXPECT_THAT(SlowBlasWarning(ref), HasSubstr("apt-get install libopenblas0"));
  BlasInfo none;
  EXPECT_THAT(SlowBlasWarning(none), HasSubstr("no BLAS"));
  BlasInfo ob = ref;
  ob.vendor = BlasVendor::kOpenBlas;
  EXPECT_THAT(SlowBlasWarning(ob), IsEmpty());
}

TEST(BlasInfoTest, DetectsTheLibraryThatDefinesSgemm) {
  BlasInfo b = DetectBlas();
  ASSERT_TRUE(b.found) << "LibTorch is linked into this test: some library defines sgemm_";
  EXPECT_TRUE(std::filesystem::exists(b.library)) << b.library;
  // The same answer as asking the dynamic linker directly.
  Dl_info where{};
  ASSERT_NE(dladdr(dlsym(RTLD_DEFAULT, "sgemm_"), &where), 0);
  EXPECT_EQ(std::filesystem::canonical(where.dli_fname).string(), b.library);
  if (b.vendor == BlasVendor::kOpenBlas) {
    EXPECT_THAT(b.version, HasSubstr("OpenBLAS"));
    EXPECT_THAT(b.threading, Not(IsEmpty()));
    // Its own pool follows SetBlasThreads (run.cc sizes it like LibTorch's).
    int before = b.threads;
    ASSERT_TRUE(SetBlasThreads(1));
    EXPECT_EQ(DetectBlas().threads, 1);
    SetBlasThreads(before);
  }
}

TEST(HostInfoTest, DriverVersionIsReadFromBothKernelModulesFirstLines) {
  // The proprietary module's line (NVIDIA's README, /proc/driver/nvidia/version) and the open
  // module's as the lent H100 wrote it (2026-11-26), where the word after "Module" is "for".
  EXPECT_EQ(ParseNvidiaDriverVersion("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  "
                                     "Sun Jul 27 07:09:59 UTC 2025"),
            "580.65.06");
  EXPECT_EQ(ParseNvidiaDriverVersion("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                     "580.159.04  Release Build  (dvs-builder@U22-I3-AF03-09-1)"),
            "580.159.04");
  EXPECT_EQ(ParseNvidiaDriverVersion("NVRM version: no version here x86_64"), "");
  EXPECT_EQ(ParseNvidiaDriverVersion(""), "");
}

TEST(HostInfoTest, FreedHostMemoryIsKeptUnlessTheUserTunedMalloc) {
#if defined(__GLIBC__)
  const char* before = std::getenv("GLIBC_TUNABLES");
  const std::string saved = before ? before : "";
  // The user's own malloc tunables win: nothing is changed.
  setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=4096", 1);
  EXPECT_FALSE(KeepFreedHostMemory());
  // Other tunables are not about malloc.
  setenv("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX512F", 1);
  EXPECT_TRUE(KeepFreedHostMemory());
  unsetenv("GLIBC_TUNABLES");
  EXPECT_TRUE(KeepFreedHostMemory());
  // Kept, not returned: 8 blocks of 8 MiB (under the 32 MiB mmap ceiling) touched, freed and
  // allocated again come back with their pages mapped. Under glibc's defaults they are either
  // mapped and unmapped one by one, or on a heap whose 64 MiB free top is trimmed (the dynamic
  // trim threshold is twice the mmap threshold, 16 MiB after an 8 MiB block): 16384 new faults.
  constexpr size_t kBlock = size_t{8} << 20;
  auto touch_all = [&](char fill) {
    std::vector<char*> blocks;
    long sum = 0;
    for (int i = 0; i < 8; ++i) {
      blocks.push_back(static_cast<char*>(std::malloc(kBlock)));
      std::memset(blocks.back(), fill, kBlock);
      sum += blocks.back()[static_cast<size_t>(i) * 4099];
    }
    for (char* b : blocks) std::free(b);
    return sum;
  };
  volatile long sink = touch_all(1);
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  sink = sink + touch_all(2);
  getrusage(RUSAGE_SELF, &r1);
  EXPECT_LT(r1.ru_minflt - r0.ru_minflt, 2048) << "8 x 8 MiB re-allocated";
  if (!saved.empty()) setenv("GLIBC_TUNABLES", saved.c_str(), 1);
#else
  EXPECT_FALSE(KeepFreedHostMemory());
#endif
}

TEST(EnvReportTest, ReportsLibTorchTheBlasWithAMeasuredRateAndTheCommunicators) {
  EnvOptions o;
  o.gemm_size = 256;  // 33.6 MFLOP: milliseconds even on the reference BLAS
  EnvReport r = CollectEnvironment(o);
  EXPECT_THAT(r.torch_version, Not(IsEmpty()));
  EXPECT_THAT(r.torch_build, Not(IsEmpty()));
  EXPECT_GE(r.intra_op_threads, 1);
  EXPECT_GE(r.cpu_cores, 1);
  EXPECT_GT(r.host_memory_bytes, 0);
  EXPECT_TRUE(r.blas.found);
  EXPECT_GT(r.blas_gflops_one_core, 0);
  EXPECT_EQ(r.blas_warning.empty(), r.blas.vendor != BlasVendor::kReference);
  EXPECT_EQ(r.gloo, GlooAvailable());
  EXPECT_EQ(r.gloo_version.empty(), !r.gloo);
  EXPECT_EQ(r.gpus.empty(), !CudaAvailable());
}

TEST(EnvCliTest, LightProgramHandsEnvToTheExecutorAndPrintsJson) {
  ProcessResult r = RunShardtune({"env", "--json", "--no-bench"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // stdout and stderr share r.output: the document is the first {...} block.
  size_t a = r.output.find('{'), b = r.output.rfind("\n}");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  nlohmann::json j = nlohmann::json::parse(r.output.substr(a, b + 2 - a));
  EXPECT_EQ(j.at("schema"), "shardtune.env");
  EXPECT_EQ(j.at("blas").at("library"), DetectBlas().library);
  EXPECT_EQ(j.at("blas").at("gflops_one_core"), 0.0);  // --no-bench
  EXPECT_TRUE(j.at("gpus").is_array());
  EXPECT_EQ(j.at("gloo").at("available"), GlooAvailable());
}

TEST(EnvCliTest, CpuRunRecordsItsBlasAndWarnsOnlyOnTheReferenceOne) {
  TempDir tmp;
  ProcessResult r = RunShardtune({"run", "--model", "tiny-llama", "--steps", "1", "--seq-len", "16",
                                  "--threads", "1", "--no-trace", "--no-checkpoints", "--out",
                                  tmp.Sub("run")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  BlasInfo b = DetectBlas();
  EXPECT_EQ(r.output.find("reference BLAS") != std::string::npos,
            b.vendor == BlasVendor::kReference)
      << r.output;
  std::ifstream in(tmp.Sub("run/measurements.json"));
  nlohmann::json m = nlohmann::json::parse(in);
  std::string blas = m.at("environment").at("blas");
  EXPECT_THAT(blas, HasSubstr(BlasVendorName(b.vendor)));
  EXPECT_THAT(blas, HasSubstr(b.library));
}

}  // namespace
}  // namespace shardtune::exec::testing

// CUDA allocator statistics and device control (see cuda_support.h).
#include "executor/cuda_support.h"

#include <string>

#include "executor/errors.h"

#ifdef SHARDTUNE_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace shardtune::exec {

#ifndef SHARDTUNE_TORCH_CUDA
bool CudaAvailable() { return false; }
void SetCudaDevice(int) { throw BackendError("this shardtune's LibTorch has no CUDA"); }
CudaMemory ReadCudaMemory(int) { throw BackendError("this shardtune's LibTorch has no CUDA"); }
void ResetCudaPeaks(int) { throw BackendError("this shardtune's LibTorch has no CUDA"); }
void SynchronizeCuda(int) { throw BackendError("this shardtune's LibTorch has no CUDA"); }
std::string CudaDeviceName(int) { throw BackendError("this shardtune's LibTorch has no CUDA"); }
std::string CudaRuntimeVersion() { return ""; }
std::string CudaDriverVersion() { return ""; }
std::vector<CudaDeviceInfo> ListCudaDevices() { return {}; }
#else
namespace {
void Check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw BackendError(std::string(what) + ": " + cudaGetErrorString(rc));
}
}  // namespace

bool CudaAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void SetCudaDevice(int device) {
  Check(cudaSetDevice(device), "cudaSetDevice");
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
}

namespace {
// The caching allocator sets itself up at the first CUDA allocation; before that its statistics
// calls throw "Invalid device argument." (c10/cuda/CUDACachingAllocator.cpp assertValidDevice),
// and every statistic is zero.
bool AllocatorReady() { return c10::cuda::CUDACachingAllocator::get()->initialized(); }
}  // namespace

CudaMemory ReadCudaMemory(int device) {
  namespace alloc = c10::cuda::CUDACachingAllocator;
  CudaMemory m;
  size_t free_b = 0, total_b = 0;
  Check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  m.device_used_bytes = static_cast<int64_t>(total_b - free_b);
  if (!AllocatorReady()) return m;
  auto stats = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  // Index 0 is StatType::AGGREGATE (c10/core/CachingDeviceAllocator.h), as torch.cuda's
  // memory_stats()["allocated_bytes.all.*"].
  m.allocated_bytes = stats.allocated_bytes[0].current;
  m.allocated_peak_bytes = stats.allocated_bytes[0].peak;
  m.reserved_bytes = stats.reserved_bytes[0].current;
  m.reserved_peak_bytes = stats.reserved_bytes[0].peak;
  m.alloc_retries = stats.num_alloc_retries;
  return m;
}

void ResetCudaPeaks(int device) {
  if (!AllocatorReady()) return;  // nothing allocated yet: every peak is zero
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

void SynchronizeCuda(int device) {
  Check(cudaSetDevice(device), "cudaSetDevice");
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

std::string CudaDeviceName(int device) {
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return prop.name;
}

namespace {
std::string CudaVersionText(int v) {  // 1000 * major + 10 * minor (CUDA Runtime API docs)
  if (v <= 0) return "";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
}  // namespace

std::string CudaRuntimeVersion() {
  int v = 0;
  return cudaRuntimeGetVersion(&v) == cudaSuccess ? CudaVersionText(v) : "";
}

std::string CudaDriverVersion() {
  int v = 0;
  return cudaDriverGetVersion(&v) == cudaSuccess ? CudaVersionText(v) : "";
}

std::vector<CudaDeviceInfo> ListCudaDevices() {
  std::vector<CudaDeviceInfo> out;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back({i, prop.name, static_cast<int64_t>(prop.totalGlobalMem), prop.major, prop.minor,
                   prop.multiProcessorCount});
  }
  return out;
}
#endif

}  // namespace shardtune::exec

// CUDA pieces of the executor that need LibTorch's CUDA build (c10_cuda): the caching
// allocator's statistics (what torch.cuda.max_memory_allocated / max_memory_reserved report),
// the device's used memory (cudaMemGetInfo, what nvidia-smi shows for this process when it is
// alone) and device selection. Built with SHARDTUNE_TORCH_CUDA only; without it every function
// reports "no CUDA" (CudaAvailable() false) and the others throw BackendError.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtune::exec {

// True when this LibTorch has CUDA and at least one device is visible.
bool CudaAvailable();
// Makes `device` current for this process (cudaSetDevice; LibTorch follows it).
void SetCudaDevice(int device);

struct CudaMemory {
  int64_t allocated_bytes = 0;       // torch.cuda.memory_allocated
  int64_t allocated_peak_bytes = 0;  // torch.cuda.max_memory_allocated
  int64_t reserved_bytes = 0;        // torch.cuda.memory_reserved
  int64_t reserved_peak_bytes = 0;   // torch.cuda.max_memory_reserved
  int64_t device_used_bytes = 0;     // total - free (cudaMemGetInfo): context, NCCL, allocator
  int64_t alloc_retries = 0;         // cudaMalloc failures the allocator retried after freeing its cache
};

CudaMemory ReadCudaMemory(int device);
// torch.cuda.reset_peak_memory_stats: peaks := current.
void ResetCudaPeaks(int device);
// Waits for every stream of the device (step timing).
void SynchronizeCuda(int device);
// cudaGetDeviceProperties name, e.g. "NVIDIA H100 80GB HBM3".
std::string CudaDeviceName(int device);

struct CudaDeviceInfo {
  int index = 0;
  std::string name;             // cudaDeviceProp::name
  int64_t total_memory_bytes = 0;  // cudaDeviceProp::totalGlobalMem (torch's total_memory)
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
};

// The CUDA runtime this build links and the driver's supported version, "12.4" (cudaRuntimeGetVersion
// / cudaDriverGetVersion: 1000*major + 10*minor); "" without CUDA or when the call fails (no
// driver installed).
std::string CudaRuntimeVersion();
std::string CudaDriverVersion();
// Every device this process sees; empty without CUDA or without a visible device.
std::vector<CudaDeviceInfo> ListCudaDevices();

}  // namespace shardtune::exec

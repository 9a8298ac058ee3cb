// CUDA pieces of the executor that need LibTorch's CUDA build (c10_cuda): the caching
// allocator's statistics (what torch.cuda.max_memory_allocated / max_memory_reserved report),
// the device's used memory (cudaMemGetInfo, what nvidia-smi shows for this process when it is
// alone) and device selection. Built with SHARDTUNE_TORCH_CUDA only; without it every function
// reports "no CUDA" (CudaAvailable() false) and the others throw BackendError.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace shardtune::exec

// The element types the executor's CUDA kernels read and write (executor/kernels/*.h).
#pragma once

namespace shardtune::exec::kernels {

enum class ElementType { kFp32, kBf16, kFp16 };

}  // namespace shardtune::exec::kernels

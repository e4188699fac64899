#pragma once
// How the kernels are launched and reach their dynamic shared memory: one
// way that the tests' CPU emulator of CUDA provides too
// (tests/backend/cuda_emulator), so the kernels' own code runs on a CPU
// where no GPU is. Only .cu files include it.
#include <cuda_runtime.h>

namespace splitspec::cuda {

// kernel<<<grid, block, shared, stream>>>(args...), each argument converted
// to its parameter's type.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream, Args... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "a kernel's arguments, one per parameter");
#if defined(SPLITSPEC_CUDA_EMULATE)
  emulator::launch(grid, block, shared, stream, [=] { kernel(static_cast<Params>(args)...); });
#else
  kernel<<<grid, block, shared, stream>>>(static_cast<Params>(args)...);
#endif
}

#if !defined(SPLITSPEC_CUDA_EMULATE)
// The block's dynamic shared memory (launch's `shared` bytes).
template <typename T>
__device__ inline T* dynamic_shared() {
  extern __shared__ __align__(16) unsigned char dynamic_shared_bytes[];
  return reinterpret_cast<T*>(dynamic_shared_bytes);
}
#else
template <typename T>
inline T* dynamic_shared() {
  return static_cast<T*>(emulator::dynamic_shared());
}
#endif

}  // namespace splitspec::cuda

#pragma once
// A CPU emulator of the part of CUDA the CUDA backend uses: the runtime's
// memory, copies, streams and events (synchronous, on host memory), and the
// kernels' builtins (thread and block indices, shuffles, barriers, the
// tensor-core product), with every thread of a block a fiber. The backend's
// own kernel code, compiled as C++ against this header, then runs on a CPU:
// slowly, but it runs, so its indices, shuffles and orders are tested where
// no GPU is (tests/backend/cuda_emulated_test). A shuffle or barrier that
// not every lane reaches, which a GPU leaves undefined, fails the launch
// here. Tests only; the shipped backend uses NVIDIA's runtime.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#if !defined(SPLITSPEC_CUDA_EMULATE)
#error "the CUDA emulator's runtime header without SPLITSPEC_CUDA_EMULATE"
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorECCUncorrectable = 214,
  cudaErrorAssert = 710,
  cudaErrorHardwareStackError = 714,
  cudaErrorIllegalInstruction = 715,
  cudaErrorMisalignedAddress = 716,
  cudaErrorInvalidAddressSpace = 717,
  cudaErrorInvalidPc = 718,
  cudaErrorLaunchFailure = 719,
  cudaErrorLaunchTimeout = 702,
  cudaErrorIllegalAddress = 700,
  cudaErrorUnknown = 999,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};
typedef struct EmulatedStream* cudaStream_t;
typedef struct EmulatedEvent* cudaEvent_t;
typedef struct EmulatedGraph* cudaGraph_t;
typedef struct EmulatedGraph* cudaGraphExec_t;
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed };
constexpr unsigned cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2;
struct cudaDeviceProp {
  char name[256];
  int major, minor;
  size_t totalGlobalMem;
  int multiProcessorCount;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);
cudaError_t cudaDeviceSynchronize();
// Capture records the launches on the stream; a graph's launch runs them.
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);

namespace emulator {

struct Indices {
  dim3 thread, block, block_dim, grid_dim;
};
// The running fiber's indices.
const Indices& indices();
// Runs `body` as every thread of every block of the grid, block by block;
// the launch's error (a kernel that diverged at a barrier) is the next
// cudaGetLastError().
void launch(dim3 grid, dim3 block, size_t shared, cudaStream_t stream, const std::function<void()>& body);
void* dynamic_shared();
void sync_warp();
void sync_block();
// Every lane of the warp offers `value`; each gets lane `src`'s.
uint64_t exchange(uint64_t value, int src);
int lane_id();
// mma.sync.m16n8k16 with fp32 sums: the fragments as warp_math.h lays them,
// summed in k order with fused multiply-adds.
void mma_16816(bool bf16, float* c, const uint4& a, const uint2& b);
// mma.sync.m16n8k32 (k = 32) or m16n8k16 (k = 16) with int8 inputs and
// int32 sums: a holds 4 (2) words, b 2 (1).
void mma_s8(int k, int* c, const uint32_t* a, const uint32_t* b);

}  // namespace emulator

#define threadIdx (::emulator::indices().thread)
#define blockIdx (::emulator::indices().block)
#define blockDim (::emulator::indices().block_dim)
#define gridDim (::emulator::indices().grid_dim)

template <typename T>
T __shfl_sync(unsigned, T v, int src) {
  static_assert(sizeof(T) <= 8, "shuffles move up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = emulator::exchange(bits, src);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  return __shfl_sync(mask, v, emulator::lane_id() ^ lane_mask);
}
inline void __syncwarp(unsigned = 0xffffffffu) { emulator::sync_warp(); }
inline void __syncthreads() { emulator::sync_block(); }
template <typename T>
T __ldg(const T* p) {
  return *p;
}
inline float cospif(float x) { return std::cos(3.14159265358979323846f * x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

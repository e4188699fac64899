// The forward's kernels besides the products and attention: norms, RoPE,
// elementwise steps, embedding rows and each row's argmax. Every one treats
// rows on their own, in an order fixed by its code alone, so each row's
// result is the same whatever else is in the batch. Also the runtime's
// errors and memory (device.h).

#include <cstdio>

#include "common/backend/cuda/device.h"
#include "common/backend/cuda/launch.h"
#include "common/backend/cuda/warp_math.h"
#include "common/util/error.h"

namespace splitspec::cuda {

using namespace blocks;

bool sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  throw Error(std::string("cuda: ") + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")" +
              (sticky(e) ? "; the GPU context is lost until the process restarts" : ""));
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

DeviceBuffer::DeviceBuffer(size_t bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMalloc(&p_, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it
    throw Error("cuda: out of device memory allocating " + std::to_string(bytes >> 20) + " MiB");
  }
  check(e, "cudaMalloc");
  bytes_ = bytes;
}

DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::ensure(size_t bytes) {
  if (bytes <= bytes_) return;
  DeviceBuffer bigger(bytes);
  *this = std::move(bigger);
}

PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}

void PinnedBuffer::ensure(size_t bytes) {
  if (bytes <= bytes_) return;
  if (p_) cudaFreeHost(p_);
  p_ = nullptr;
  bytes_ = 0;
  check(cudaMallocHost(&p_, bytes), "cudaMallocHost");
  bytes_ = bytes;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int kNormThreads = 256;

// One block per row: each thread's squares in double over its strided
// columns, then a fixed tree; the mean rounded to float.
__device__ void norm_row(const float* __restrict__ x, int64_t dim, const float* __restrict__ weight, float eps,
                         float* __restrict__ y) {
  __shared__ double partial[kNormThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) {
    const double v = x[i];
    s += v * v;
  }
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int half = kNormThreads / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float mean = static_cast<float>(partial[0] / static_cast<double>(dim));
  const float inv = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) y[i] = (x[i] * inv) * weight[i];
}

__global__ void rms_norm_kernel(const float* __restrict__ x, int64_t dim, const float* __restrict__ weight, float eps,
                                float* __restrict__ y) {
  const int64_t r = blockIdx.x;
  norm_row(x + r * dim, dim, weight, eps, y + r * dim);
}

__global__ void rms_norm_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, int64_t dim,
                                     const float* __restrict__ weight, float eps, float* __restrict__ y) {
  const int64_t i = blockIdx.x;
  norm_row(x + static_cast<int64_t>(rows[i]) * dim, dim, weight, eps, y + i * dim);
}

__global__ void rope_kernel(float* __restrict__ x, int64_t n, int64_t heads, int64_t head_dim,
                            const int32_t* __restrict__ positions, const float* __restrict__ cos,
                            const float* __restrict__ sin) {
  const int64_t half = head_dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * heads * half) return;
  const int64_t row = i / (heads * half), rest = i % (heads * half), h = rest / half, k = rest % half;
  float* v = x + (row * heads + h) * head_dim;
  const int64_t p = positions[row];
  const float c = cos[p * half + k], s = sin[p * half + k];
  const float x0 = v[k], x1 = v[k + half];
  v[k] = x0 * c - x1 * s;
  v[k + half] = x0 * s + x1 * c;
}

__global__ void add_bias_kernel(float* __restrict__ x, int64_t rows, int64_t cols, const float* __restrict__ bias) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * cols) x[i] = x[i] + bias[i % cols];
}

__global__ void add_kernel(float* __restrict__ x, const float* __restrict__ d, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] = x[i] + d[i];
}

__global__ void silu_mul_kernel(float* __restrict__ g, const float* __restrict__ u, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float v = g[i];
  g[i] = v / (1.0f + expf(-v)) * u[i];
}

__global__ void embed_kernel(const DeviceMatrix w, const int32_t* __restrict__ ids, int64_t n, float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * w.cols) return;
  const int64_t row = ids[i / w.cols], c = i % w.cols;
  float v = 0.0f;
  switch (w.type) {
    case WType::F32: v = static_cast<const float*>(w.q)[row * w.cols + c]; break;
    case WType::BF16: v = blocks::bf16_to_float(static_cast<const uint16_t*>(w.q)[tiled_offset(row, c, w.cols)]); break;
    case WType::F16: v = blocks::half_to_float(static_cast<const uint16_t*>(w.q)[tiled_offset(row, c, w.cols)]); break;
    case WType::Q8_0: {
      const uint16_t d = static_cast<const uint16_t*>(w.d)[row * w.blocks() + c / kQ8];
      v = q8_0_value(blocks::half_to_float(d), static_cast<const int8_t*>(w.q)[row * w.cols + c]);
      break;
    }
    case WType::Q4_K: {
      const int64_t at = row * w.blocks() + c / kSuper;
      const uint16_t* dd = static_cast<const uint16_t*>(w.d) + 2 * at;
      v = q4k_value(blocks::half_to_float(dd[0]), blocks::half_to_float(dd[1]), static_cast<const uint8_t*>(w.s) + 12 * at,
                    static_cast<const uint8_t*>(w.q) + 128 * at, static_cast<int>(c % kSuper));
      break;
    }
    case WType::Q6_K: {
      const int64_t at = row * w.blocks() + c / kSuper;
      const uint8_t* q = static_cast<const uint8_t*>(w.q) + 192 * at;
      v = q6k_value(blocks::half_to_float(static_cast<const uint16_t*>(w.d)[at]), static_cast<const int8_t*>(w.s) + 16 * at, q,
                    q + 128, static_cast<int>(c % kSuper));
      break;
    }
    default: break;
  }
  out[i] = v;
}

// A block per row: each thread's first maximum over its strided columns,
// then pairs by value, the lower index among equals.
__global__ void argmax_kernel(const float* __restrict__ x, int64_t cols, int32_t* __restrict__ out) {
  __shared__ float best_v[256];
  __shared__ int32_t best_i[256];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * cols;
  float v = -INFINITY;
  int32_t at = 0x7fffffff;  // none: loses to any column
  for (int64_t c = threadIdx.x; c < cols; c += 256) {
    const float x = row[c];
    if (at == 0x7fffffff || x > v) {
      v = x;
      at = static_cast<int32_t>(c);
    }
  }
  best_v[threadIdx.x] = v;
  best_i[threadIdx.x] = at;
  __syncthreads();
  for (int half = 128; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) {
      const float ov = best_v[threadIdx.x + half];
      const int32_t oi = best_i[threadIdx.x + half];
      if (ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x])) {
        best_v[threadIdx.x] = ov;
        best_i[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = best_i[0];
}

}  // namespace

void rms_norm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* y, cudaStream_t stream) {
  if (rows == 0) return;
  launch(rms_norm_kernel, static_cast<unsigned>(rows), kNormThreads, 0, stream, x, dim, weight, eps, y);
  check_launch("rms_norm");
}

void rms_norm_rows(const float* x, const int32_t* rows, int64_t count, int64_t dim, const float* weight, float eps,
                   float* y, cudaStream_t stream) {
  if (count == 0) return;
  launch(rms_norm_rows_kernel, static_cast<unsigned>(count), kNormThreads, 0, stream, x, rows, dim, weight, eps, y);
  check_launch("rms_norm (rows)");
}

void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const int32_t* positions, const float* cos,
          const float* sin, cudaStream_t stream) {
  const int64_t count = n * heads * (head_dim / 2);
  if (count == 0) return;
  launch(rope_kernel, ceil_div(count, 256), 256, 0, stream, x, n, heads, head_dim, positions, cos, sin);
  check_launch("rope");
}

void add_bias(float* x, int64_t rows, int64_t cols, const float* bias, cudaStream_t stream) {
  if (rows * cols == 0) return;
  launch(add_bias_kernel, ceil_div(rows * cols, 256), 256, 0, stream, x, rows, cols, bias);
  check_launch("add_bias");
}

void add_inplace(float* x, const float* d, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  launch(add_kernel, ceil_div(count, 256), 256, 0, stream, x, d, count);
  check_launch("add");
}

void silu_mul(float* gate, const float* up, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  launch(silu_mul_kernel, ceil_div(count, 256), 256, 0, stream, gate, up, count);
  check_launch("silu_mul");
}

void embed(const DeviceMatrix& w, const int32_t* ids, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  launch(embed_kernel, ceil_div(n * w.cols, 256), 256, 0, stream, w, ids, n, out);
  check_launch("embed");
}

void argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* out, cudaStream_t stream) {
  if (rows == 0) return;
  launch(argmax_kernel, static_cast<unsigned>(rows), 256, 0, stream, x, cols, out);
  check_launch("argmax");
}

}  // namespace splitspec::cuda

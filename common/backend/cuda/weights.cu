// Weights into their device layouts (device.h's DeviceMatrix): from the
// file's rows, uploaded as stored and rearranged here; or made here from
// random values, quantized by our own quantizer (block_arith.h), for
// benchmarks of models no file holds.

#include "common/backend/cuda/device.h"
#include "common/backend/cuda/launch.h"
#include "common/backend/cuda/device_weights.h"
#include "common/backend/cuda/warp_math.h"
#include "common/util/error.h"

namespace splitspec::cuda {

using namespace blocks;

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// 16-bit rows into fragment tiles; the padding stays as zeroed.
__global__ void tile_kernel(const uint16_t* __restrict__ plain, int64_t rows, int64_t cols, uint16_t* __restrict__ tiled) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  tiled[tiled_offset(i / cols, i % cols, cols)] = plain[i];
}

// File blocks (scales first for Q8_0 and Q4_K, last for Q6_K) into the
// quants, scales and halves apart, one thread per block.
__global__ void split_blocks_kernel(WType type, const uint8_t* __restrict__ plain, int64_t blocks,
                                    uint8_t* __restrict__ q, uint8_t* __restrict__ s, uint16_t* __restrict__ d) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  if (type == WType::Q8_0) {
    const uint8_t* in = plain + 34 * b;
    d[b] = static_cast<uint16_t>(in[0] | (in[1] << 8));
    for (int i = 0; i < 32; ++i) q[32 * b + i] = in[2 + i];
  } else if (type == WType::Q4_K) {
    const uint8_t* in = plain + 144 * b;
    d[2 * b] = static_cast<uint16_t>(in[0] | (in[1] << 8));
    d[2 * b + 1] = static_cast<uint16_t>(in[2] | (in[3] << 8));
    for (int i = 0; i < 12; ++i) s[12 * b + i] = in[4 + i];
    for (int i = 0; i < 128; ++i) q[128 * b + i] = in[16 + i];
  } else {
    const uint8_t* in = plain + 210 * b;
    for (int i = 0; i < 192; ++i) q[192 * b + i] = in[i];
    for (int i = 0; i < 16; ++i) s[16 * b + i] = in[192 + i];
    d[b] = static_cast<uint16_t>(in[208] | (in[209] << 8));
  }
}

// A normal value from (seed, index): Box-Muller on two hashed uniforms.
__device__ uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
__device__ float normal_at(uint64_t seed, uint64_t i) {
  const uint64_t h = mix64(seed ^ mix64(i));
  const float u1 = (static_cast<float>(h >> 40) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
  const float u2 = static_cast<float>((h >> 16) & 0xffffff) * (1.0f / 16777216.0f);
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

__global__ void random_float_kernel(WType type, int64_t rows, int64_t cols, float scale, uint64_t seed, void* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const float v = normal_at(seed, static_cast<uint64_t>(i)) * scale;
  if (type == WType::F32) {
    static_cast<float*>(out)[i] = v;
    return;
  }
  const uint16_t bits = type == WType::BF16 ? blocks::float_to_bf16(v) : blocks::float_to_half(v);
  static_cast<uint16_t*>(out)[tiled_offset(i / cols, i % cols, cols)] = bits;
}

__global__ void random_kquant_kernel(WType type, int64_t blocks, float scale, uint64_t seed, uint8_t* __restrict__ q,
                                     uint8_t* __restrict__ s, uint16_t* __restrict__ d) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  float x[kSuper];
  for (int i = 0; i < kSuper; ++i) x[i] = normal_at(seed, static_cast<uint64_t>(b * kSuper + i)) * scale;
  uint8_t block[210];
  if (type == WType::Q4_K) {
    quantize_q4k(x, block);
    d[2 * b] = static_cast<uint16_t>(block[0] | (block[1] << 8));
    d[2 * b + 1] = static_cast<uint16_t>(block[2] | (block[3] << 8));
    for (int i = 0; i < 12; ++i) s[12 * b + i] = block[4 + i];
    for (int i = 0; i < 128; ++i) q[128 * b + i] = block[16 + i];
  } else {
    quantize_q6k(x, block);
    for (int i = 0; i < 192; ++i) q[192 * b + i] = block[i];
    for (int i = 0; i < 16; ++i) s[16 * b + i] = block[192 + i];
    d[b] = static_cast<uint16_t>(block[208] | (block[209] << 8));
  }
}

__global__ void random_gains_kernel(float* out, int64_t n, float scale, uint64_t seed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 1.0f + normal_at(seed, static_cast<uint64_t>(i)) * scale;
}

bool tiled(WType t) { return t == WType::BF16 || t == WType::F16; }

}  // namespace

DeviceBytes device_bytes(WType type, int64_t rows, int64_t cols) {
  DeviceBytes b;
  switch (type) {
    case WType::F32: b.q = static_cast<size_t>(rows * cols) * 4; break;
    case WType::BF16:
    case WType::F16: b.q = static_cast<size_t>(ceil_div(rows, 16) * 16 * ceil_div(cols, 16) * 16) * 2; break;
    case WType::Q8_0:
      b.q = static_cast<size_t>(rows * cols);
      b.d = static_cast<size_t>(rows * (cols / 32)) * 2;
      break;
    case WType::Q4_K:
      b.q = static_cast<size_t>(rows * (cols / 256)) * 128;
      b.s = static_cast<size_t>(rows * (cols / 256)) * 12;
      b.d = static_cast<size_t>(rows * (cols / 256)) * 4;
      break;
    case WType::Q6_K:
      b.q = static_cast<size_t>(rows * (cols / 256)) * 192;
      b.s = static_cast<size_t>(rows * (cols / 256)) * 16;
      b.d = static_cast<size_t>(rows * (cols / 256)) * 2;
      break;
    default:
      throw Error(std::string("cuda: ") + wtype_name(type) + " weights do not run on the GPU (it runs " +
                  gpu_weight_types() + ")");
  }
  return b;
}

DeviceMatrix OwnedMatrix::view() const {
  DeviceMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  m.q = q.get();
  m.s = s.get();
  m.d = d.get();
  return m;
}

OwnedMatrix allocate_matrix(WType type, int64_t rows, int64_t cols) {
  if (!gpu_runs(type))
    throw Error(std::string("cuda: ") + wtype_name(type) + " weights do not run on the GPU (it runs " +
                gpu_weight_types() + ")");
  if (type == WType::Q8_0 && cols % 32 != 0) throw Error("cuda: q8_0 rows need a multiple of 32 columns");
  if ((type == WType::Q4_K || type == WType::Q6_K) && cols % 256 != 0)
    throw Error(std::string("cuda: ") + wtype_name(type) + " rows need a multiple of 256 columns");
  const DeviceBytes b = device_bytes(type, rows, cols);
  OwnedMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  m.q = DeviceBuffer(b.q);
  m.s = DeviceBuffer(b.s);
  m.d = DeviceBuffer(b.d);
  // Tiles' padding must be zeros.
  if (tiled(type)) SPLITSPEC_CUDA(cudaMemset(m.q.get(), 0, b.q));
  return m;
}

OwnedMatrix upload_matrix(const MatrixRef& plain, DeviceBuffer& staging, cudaStream_t stream) {
  if (plain.packed) throw Error("cuda: a packed matrix; upload the file's rows");
  OwnedMatrix m = allocate_matrix(plain.type, plain.rows, plain.cols);
  const size_t bytes = static_cast<size_t>(plain.bytes());
  if (plain.type == WType::F32) {
    SPLITSPEC_CUDA(cudaMemcpyAsync(m.q.get(), plain.data, bytes, cudaMemcpyHostToDevice, stream));
  } else {
    staging.ensure(bytes);
    SPLITSPEC_CUDA(cudaMemcpyAsync(staging.get(), plain.data, bytes, cudaMemcpyHostToDevice, stream));
    if (tiled(plain.type)) {
      const int64_t count = plain.rows * plain.cols;
      launch(tile_kernel, ceil_div(count, 256), 256, 0, stream, staging.as<uint16_t>(), plain.rows, plain.cols,
                                                            m.q.as<uint16_t>());
      check_launch("tile weights");
    } else {
      const int64_t blocks = plain.rows * m.view().blocks();
      launch(split_blocks_kernel, ceil_div(blocks, 128), 128, 0, stream, plain.type, staging.as<uint8_t>(), blocks,
                                                                    m.q.as<uint8_t>(), m.s.as<uint8_t>(),
                                                                    m.d.as<uint16_t>());
      check_launch("split weight blocks");
    }
  }
  // The staging buffer is reused by the next upload.
  SPLITSPEC_CUDA(cudaStreamSynchronize(stream));
  return m;
}

OwnedMatrix random_matrix(WType type, int64_t rows, int64_t cols, float scale, uint64_t seed, cudaStream_t stream) {
  if (type == WType::Q8_0) throw Error("cuda: random q8_0 weights are not made on the GPU (bf16, f16, f32, q4_k, q6_k)");
  OwnedMatrix m = allocate_matrix(type, rows, cols);
  if (type == WType::Q4_K || type == WType::Q6_K) {
    const int64_t blocks = rows * (cols / 256);
    launch(random_kquant_kernel, ceil_div(blocks, 64), 64, 0, stream, type, blocks, scale, seed, m.q.as<uint8_t>(),
                                                                 m.s.as<uint8_t>(), m.d.as<uint16_t>());
  } else {
    launch(random_float_kernel, ceil_div(rows * cols, 256), 256, 0, stream, type, rows, cols, scale, seed, m.q.get());
  }
  check_launch("random weights");
  return m;
}

void random_gains(float* out, int64_t n, float scale, uint64_t seed, cudaStream_t stream) {
  launch(random_gains_kernel, ceil_div(n, 256), 256, 0, stream, out, n, scale, seed);
  check_launch("random gains");
}

}  // namespace splitspec::cuda

// The GPU's matrix products (device.h's linear()).
//
// Quantized weights (Q8_0, Q4_K, Q6_K): the activations are quantized per
// row and block as the CPU does (block_arith.h), a warp takes one weight row
// and up to 32 inputs, its lanes split each block's exact integer sums
// (warp_math.h) and add them up by shuffles, and lane j then runs input j's
// multiply-adds block by block in order: the CPU reference's definition, so
// the same bits. Integers are exact in any order; the order of the float
// steps is the definition's.
//
// BF16 and F16 weights: tensor cores (mma.m16n8k16, fp32 sums), inputs
// rounded to the weight's type. Each output's sum runs over the columns in
// chunks of kFloatChunk, each chunk from zero in column order, the chunks
// added in order: fixed whatever the number of rows, so batch-invariant. F32
// weights: a warp per output, lanes striding the columns, a fixed butterfly.

#include <algorithm>
#include <cstdlib>
#include <string>

#include "common/backend/cuda/device.h"
#include "common/backend/cuda/launch.h"
#include "common/backend/cuda/warp_math.h"
#include "common/util/error.h"

namespace splitspec::cuda {

using namespace blocks;

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarps = 4;           // warps a thread block
constexpr int kTokensPerWarp = 32;  // inputs a warp carries (one lane each)
constexpr int kTokenGroup = 8;      // inputs whose integer sums a lane holds at once

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
__device__ inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// ---- Activations -----------------------------------------------------------

// One warp per Q8_0 block of 32 inputs, a lane per value.
__global__ void quantize_q8_kernel(const float* __restrict__ x, int64_t n, int64_t cols, int8_t* __restrict__ q,
                                   float* __restrict__ d) {
  const int64_t blocks_per_row = cols / kQ8;
  const int64_t block = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (block >= n * blocks_per_row) return;
  const int lane = threadIdx.x % 32;
  const int64_t r = block / blocks_per_row, b = block % blocks_per_row;
  const float v = x[r * cols + b * kQ8 + lane];
  float amax = fabsf(v);
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, o));
  q[r * cols + b * kQ8 + lane] = q8_quant(v, q8_inverse_scale(amax));
  if (lane == 0) d[block] = q8_scale(amax);
}

// One warp per Q8_K super-block of 256 inputs, eight values a lane (lane l
// holds 8l .. 8l + 7, so a 16-sum is two lanes'). The maximum's reduction
// keeps the larger magnitude, then the lower index: the first such value.
__global__ void quantize_q8k_kernel(const float* __restrict__ x, int64_t n, int64_t cols, int8_t* __restrict__ q,
                                    float* __restrict__ d, int16_t* __restrict__ bsums) {
  const int64_t blocks_per_row = cols / kSuper;
  const int64_t block = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (block >= n * blocks_per_row) return;
  const int lane = threadIdx.x % 32;
  const int64_t r = block / blocks_per_row, b = block % blocks_per_row;
  const float* v = x + r * cols + b * kSuper + 8 * lane;
  float vals[8];
  float amax = 0.0f, max = 0.0f;
  int at = 1 << 30;
  for (int i = 0; i < 8; ++i) {
    vals[i] = v[i];
    if (fabsf(vals[i]) > amax) {
      amax = fabsf(vals[i]);
      max = vals[i];
      at = 8 * lane + i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float oa = __shfl_xor_sync(kFull, amax, o), om = __shfl_xor_sync(kFull, max, o);
    const int oat = __shfl_xor_sync(kFull, at, o);
    if (oa > amax || (oa == amax && oat < at)) {
      amax = oa;
      max = om;
      at = oat;
    }
  }
  int8_t* out = q + r * cols + b * kSuper + 8 * lane;
  int16_t* sums = bsums + block * 16;
  if (amax == 0.0f) {
    for (int i = 0; i < 8; ++i) out[i] = 0;
    if (lane % 2 == 0) sums[lane / 2] = 0;
    if (lane == 0) d[block] = 0.0f;
    return;
  }
  const float iscale = q8k_inverse_scale(max);
  int s = 0;
  for (int i = 0; i < 8; ++i) {
    out[i] = q8k_quant(vals[i], iscale);
    s += out[i];
  }
  s += __shfl_xor_sync(kFull, s, 1);
  if (lane % 2 == 0) sums[lane / 2] = static_cast<int16_t>(s);
  if (lane == 0) d[block] = 1.0f / iscale;
}

// Inputs rounded to 16 bits in B-fragment tiles (b_tiled_offset), padded
// with zeros to whole tiles.
template <bool kBf16>
__global__ void tile_inputs_kernel(const float* __restrict__ x, int64_t n, int64_t cols, int64_t n_pad,
                                   int64_t cols_pad, uint16_t* __restrict__ xt) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_pad * cols_pad) return;
  const int64_t j = i / cols_pad, k = i % cols_pad;
  const float v = j < n && k < cols ? x[j * cols + k] : 0.0f;
  xt[b_tiled_offset(j, k, cols_pad)] = kBf16 ? blocks::float_to_bf16(v) : blocks::float_to_half(v);
}

// ---- Quantized products ----------------------------------------------------

// What a type's kernel needs of it: weights per block, lanes a block, and a
// lane's share of a block's sums.
template <WType T>
struct Quant;

template <>
struct Quant<WType::Q8_0> {
  static constexpr int kWeights = kQ8, kLanes = kQ8LanesPerBlock, kMins = false;
  __device__ static int32_t sumi(const DeviceMatrix& w, int64_t row, int64_t b, int p, const int8_t* xq) {
    return q8_0_lane_sum(p, static_cast<const int8_t*>(w.q) + row * w.cols + b * kQ8, xq);
  }
  __device__ static int32_t summ(const DeviceMatrix&, int64_t, int64_t, int, const int16_t*) { return 0; }
  __device__ static float accumulate(const DeviceMatrix& w, int64_t row, int64_t b, float acc, int32_t si, int32_t,
                                     float dx) {
    const uint16_t dw = static_cast<const uint16_t*>(w.d)[row * w.blocks() + b];
    return q8_0_accumulate(acc, si, blocks::half_to_float(dw), dx);
  }
};

template <>
struct Quant<WType::Q4_K> {
  static constexpr int kWeights = kSuper, kLanes = kKLanesPerBlock, kMins = true;
  __device__ static int32_t sumi(const DeviceMatrix& w, int64_t row, int64_t b, int p, const int8_t* xq) {
    const int64_t at = row * w.blocks() + b;
    return q4k_lane_sumi(p, static_cast<const uint8_t*>(w.q) + at * 128, static_cast<const uint8_t*>(w.s) + at * 12, xq);
  }
  __device__ static int32_t summ(const DeviceMatrix& w, int64_t row, int64_t b, int p, const int16_t* bsums) {
    const int64_t at = row * w.blocks() + b;
    return q4k_lane_summ(p, static_cast<const uint8_t*>(w.s) + at * 12, bsums);
  }
  __device__ static float accumulate(const DeviceMatrix& w, int64_t row, int64_t b, float acc, int32_t si, int32_t sm,
                                     float dx) {
    const uint16_t* dd = static_cast<const uint16_t*>(w.d) + 2 * (row * w.blocks() + b);
    return kquant_accumulate_mins(acc, si, sm, blocks::half_to_float(dd[0]), blocks::half_to_float(dd[1]), dx);
  }
};

template <>
struct Quant<WType::Q6_K> {
  static constexpr int kWeights = kSuper, kLanes = kKLanesPerBlock, kMins = false;
  __device__ static int32_t sumi(const DeviceMatrix& w, int64_t row, int64_t b, int p, const int8_t* xq) {
    const int64_t at = row * w.blocks() + b;
    return q6k_lane_sumi(p, static_cast<const uint8_t*>(w.q) + at * 192, static_cast<const int8_t*>(w.s) + at * 16, xq);
  }
  __device__ static int32_t summ(const DeviceMatrix&, int64_t, int64_t, int, const int16_t*) { return 0; }
  __device__ static float accumulate(const DeviceMatrix& w, int64_t row, int64_t b, float acc, int32_t si, int32_t,
                                     float dx) {
    const uint16_t dw = static_cast<const uint16_t*>(w.d)[row * w.blocks() + b];
    return kquant_accumulate(acc, si, blocks::half_to_float(dw), dx);
  }
};

// A warp per weight row; blockIdx.y picks 32 inputs. Each pass covers
// 32 / kLanes blocks of the row; for every group of 8 inputs the lanes of a
// block add their shares (xor shuffles: every lane of the block ends with
// the total), then the totals go, block by block in order, to the lanes of
// the inputs, which add their block's term.
template <WType T>
__global__ void __launch_bounds__(kWarps * 32) linear_quant_kernel(const DeviceMatrix w, int64_t n,
                                                                   const int8_t* __restrict__ xq,
                                                                   const float* __restrict__ xd,
                                                                   const int16_t* __restrict__ bsums,
                                                                   float* __restrict__ y) {
  using Q = Quant<T>;
  constexpr int kPerPass = 32 / Q::kLanes;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= w.rows) return;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokensPerWarp;
  const int tokens = static_cast<int>(imin(kTokensPerWarp, n - t0));
  const int64_t nb = w.blocks();
  const int p = lane % Q::kLanes;
  float acc = 0.0f;  // input t0 + lane's sum
  for (int64_t pass = 0; pass * kPerPass < nb; ++pass) {
    const int64_t b = pass * kPerPass + lane / Q::kLanes;
    for (int g = 0; g * kTokenGroup < tokens; ++g) {
      int32_t si[kTokenGroup], sm[kTokenGroup];
#pragma unroll
      for (int u = 0; u < kTokenGroup; ++u) {
        const int t = g * kTokenGroup + u;
        si[u] = 0;
        sm[u] = 0;
        if (b < nb && t < tokens) {
          const int64_t j = t0 + t;
          si[u] = Q::sumi(w, row, b, p, xq + j * w.cols + b * Q::kWeights);
          if (Q::kMins) sm[u] = Q::summ(w, row, b, p, bsums + (j * nb + b) * 16);
        }
#pragma unroll
        for (int o = Q::kLanes / 2; o > 0; o >>= 1) {
          si[u] += __shfl_xor_sync(kFull, si[u], o);
          if (Q::kMins) sm[u] += __shfl_xor_sync(kFull, sm[u], o);
        }
      }
      // Block by block in order, to the lanes of this group's inputs.
      for (int qb = 0; qb < kPerPass; ++qb) {
        const int64_t bb = pass * kPerPass + qb;
        if (bb >= nb) break;
        int32_t mine_i = 0, mine_m = 0;
#pragma unroll
        for (int u = 0; u < kTokenGroup; ++u) {
          const int32_t vi = __shfl_sync(kFull, si[u], qb * Q::kLanes);
          const int32_t vm = Q::kMins ? __shfl_sync(kFull, sm[u], qb * Q::kLanes) : 0;
          if (lane == g * kTokenGroup + u) {
            mine_i = vi;
            mine_m = vm;
          }
        }
        if (lane >= g * kTokenGroup && lane < g * kTokenGroup + kTokenGroup && lane < tokens)
          acc = Q::accumulate(w, row, bb, acc, mine_i, mine_m, xd[(t0 + lane) * nb + bb]);
      }
    }
  }
  if (lane < tokens) y[(t0 + lane) * w.rows + row] = acc;
}

// ---- K-quant products on the int8 tensor cores (many inputs) -----------------
//
// The same definition, its integers from mma: a block of 4 warps takes 16
// weight rows and up to 8 kNt inputs; each warp takes one super-block of
// every 4 (its sub-blocks' exact dots from mma.m16n8k32 for Q4_K,
// m16n8k16 for Q6_K, times their scales), leaves the super-block's integer
// sums in shared memory, and then every thread adds, for the outputs it
// owns, the 4 super-blocks' terms in order. Integers are exact, so these
// are the dp4a kernel's outputs, and the CPU's.

__device__ void mma_s8_16832(int* c, const uint32_t* a, const uint32_t* b) {
#if defined(SPLITSPEC_CUDA_EMULATE)
  emulator::mma_s8(32, c, a, b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ void mma_s8_16816(int* c, const uint32_t* a, const uint32_t* b) {
#if defined(SPLITSPEC_CUDA_EMULATE)
  emulator::mma_s8(16, c, a, b);
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(b[0]));
#endif
}

template <WType T, int kNt>
__global__ void __launch_bounds__(kWarps * 32) linear_kquant_mma_kernel(const DeviceMatrix w, int64_t n,
                                                                        const int8_t* __restrict__ xq,
                                                                        const float* __restrict__ xd,
                                                                        const int16_t* __restrict__ bsums,
                                                                        float* __restrict__ y) {
  constexpr bool kQ4 = T == WType::Q4_K;
  constexpr int kTokens = 8 * kNt;
  __shared__ int sumi[kWarps][16][kTokens], summ[kWarps][16][kTokens];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16, tok0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  const int64_t nb = w.blocks();
  const int64_t rows[2] = {row0 + g, row0 + g + 8};
  float acc[kNt];
  for (int u = 0; u < kNt; ++u) acc[u] = 0.0f;
  for (int64_t chunk = 0; chunk * kWarps < nb; ++chunk) {
    const int64_t b = chunk * kWarps + warp;
    int si[kNt][4], sm[kNt][4];
    for (int u = 0; u < kNt; ++u)
      for (int i = 0; i < 4; ++i) si[u][i] = sm[u][i] = 0;
    if (b < nb) {
      // This warp's super-block: each sub-block's dots, scaled.
      const uint8_t* wq[2];
      int sc[2][16], mn[2][8];
      for (int r = 0; r < 2; ++r) {
        const bool live = rows[r] < w.rows;
        const int64_t at = (live ? rows[r] : row0) * nb + b;
        wq[r] = live ? static_cast<const uint8_t*>(w.q) + at * (kQ4 ? 128 : 192) : nullptr;
        for (int s = 0; s < (kQ4 ? 8 : 16); ++s) {
          if (kQ4) {
            q4k_scale_min(s, static_cast<const uint8_t*>(w.s) + at * 12, &sc[r][s], &mn[r][s]);
          } else {
            sc[r][s] = static_cast<const int8_t*>(w.s)[at * 16 + s];
          }
        }
      }
      for (int s = 0; s < (kQ4 ? 8 : 16); ++s) {
        uint32_t a[4];
        for (int r = 0; r < 2; ++r) {
          if (kQ4) {
            a[r] = wq[r] ? q4k_fragment_word(wq[r], s, 4 * t) : 0;
            a[r + 2] = wq[r] ? q4k_fragment_word(wq[r], s, 16 + 4 * t) : 0;
          } else {
            a[r] = wq[r] ? q6k_fragment_word(wq[r], s, 4 * t) : 0;
          }
        }
        const int width = kQ4 ? 32 : 16;
        for (int u = 0; u < kNt; ++u) {
          const int64_t tok = tok0 + 8 * u + g;
          const int8_t* x = xq + (tok < n ? tok : 0) * w.cols + b * kSuper + width * s;
          uint32_t bw[2] = {tok < n ? word_at(x + 4 * t) : 0u, tok < n && kQ4 ? word_at(x + 16 + 4 * t) : 0u};
          int c[4] = {0, 0, 0, 0};
          if (kQ4)
            mma_s8_16832(c, a, bw);
          else
            mma_s8_16816(c, a, bw);
          for (int i = 0; i < 4; ++i) si[u][i] += sc[i / 2][s] * c[i];
        }
      }
      if (kQ4) {
        // The mins against the inputs' 16-sums, for this lane's outputs.
        for (int u = 0; u < kNt; ++u)
          for (int i = 0; i < 4; ++i) {
            const int64_t tok = tok0 + 8 * u + c_n(lane, i);
            if (tok >= n) continue;
            const int16_t* bs = bsums + (tok * nb + b) * 16;
            int total = 0;
            for (int s = 0; s < 8; ++s) total += mn[i / 2][s] * (bs[2 * s] + bs[2 * s + 1]);
            sm[u][i] = total;
          }
      }
    }
    for (int u = 0; u < kNt; ++u)
      for (int i = 0; i < 4; ++i) {
        sumi[warp][c_row(lane, i)][8 * u + c_n(lane, i)] = si[u][i];
        summ[warp][c_row(lane, i)][8 * u + c_n(lane, i)] = sm[u][i];
      }
    __syncthreads();
    // The chunk's super-blocks in order, for the outputs this thread owns.
    for (int k = 0; k < kNt; ++k) {
      const int e = threadIdx.x + kWarps * 32 * k;
      const int r = e % 16, j = e / 16;
      const int64_t row = row0 + r, tok = tok0 + j;
      if (row >= w.rows || tok >= n) continue;
      for (int q = 0; q < kWarps; ++q) {
        const int64_t bb = chunk * kWarps + q;
        if (bb >= nb) break;
        const int64_t at = row * nb + bb;
        const float dx = xd[tok * nb + bb];
        if (kQ4) {
          const uint16_t* dd = static_cast<const uint16_t*>(w.d) + 2 * at;
          acc[k] = kquant_accumulate_mins(acc[k], sumi[q][r][j], summ[q][r][j], blocks::half_to_float(dd[0]),
                                          blocks::half_to_float(dd[1]), dx);
        } else {
          acc[k] = kquant_accumulate(acc[k], sumi[q][r][j], blocks::half_to_float(static_cast<const uint16_t*>(w.d)[at]), dx);
        }
      }
    }
    __syncthreads();
  }
  for (int k = 0; k < kNt; ++k) {
    const int e = threadIdx.x + kWarps * 32 * k;
    const int64_t row = row0 + e % 16, tok = tok0 + e / 16;
    if (row < w.rows && tok < n) y[tok * w.rows + row] = acc[k];
  }
}

// Which quantized kernel takes how many inputs: SPLITSPEC_CUDA_QUANT_MMA
// = never or always overrides (to measure both); the bits are the same.
enum class QuantPath { kDp4a, kMma };
QuantPath quant_path(WType t, int64_t n) {
  static const std::string choice = [] {
    const char* env = std::getenv("SPLITSPEC_CUDA_QUANT_MMA");
    return std::string(env ? env : "auto");
  }();
  if (t == WType::Q8_0 || choice == "never") return QuantPath::kDp4a;
  if (choice == "always") return QuantPath::kMma;
  return n > kTokenGroup ? QuantPath::kMma : QuantPath::kDp4a;
}

// ---- Float products ---------------------------------------------------------

template <bool kBf16>
__device__ void mma_16816(float* c, const uint4& a, const uint2& b) {
#if defined(SPLITSPEC_CUDA_EMULATE)
  emulator::mma_16816(kBf16, c, a, b);
#else
  if (kBf16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y));
#endif
}

// A warp per 16-row tile and chunk of columns (blockIdx.y), kNt tiles of 8
// inputs from tile blockIdx.z * kNt: the chunk's sums from zero, in column
// order, into partials[chunk][input][row].
template <bool kBf16, int kNt>
__global__ void __launch_bounds__(kWarps * 32) linear_mma_kernel(const uint16_t* __restrict__ wt, int64_t m_tiles,
                                                                 int64_t k_tiles, const uint16_t* __restrict__ xt,
                                                                 int64_t n_tiles, float* __restrict__ partials,
                                                                 int64_t rows_pad, int64_t n_pad) {
  constexpr int64_t kChunkTiles = kFloatChunk / 16;
  const int lane = threadIdx.x % 32;
  const int64_t mt = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (mt >= m_tiles) return;
  const int64_t chunk = blockIdx.y;
  const int64_t nt0 = static_cast<int64_t>(blockIdx.z) * kNt;
  const int64_t s0 = chunk * kChunkTiles, s1 = imin(k_tiles, s0 + kChunkTiles);
  float c[kNt][4];
#pragma unroll
  for (int t = 0; t < kNt; ++t) c[t][0] = c[t][1] = c[t][2] = c[t][3] = 0.0f;
  const uint4* a_ptr = reinterpret_cast<const uint4*>(wt) + (mt * k_tiles) * 32 + lane;
  for (int64_t s = s0; s < s1; ++s) {
    const uint4 a = __ldg(a_ptr + s * 32);
#pragma unroll
    for (int t = 0; t < kNt; ++t) {
      if (nt0 + t >= n_tiles) break;
      const uint2 b = __ldg(reinterpret_cast<const uint2*>(xt) + ((nt0 + t) * k_tiles + s) * 32 + lane);
      mma_16816<kBf16>(c[t], a, b);
    }
  }
#pragma unroll
  for (int t = 0; t < kNt; ++t) {
    if (nt0 + t >= n_tiles) break;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t r = mt * 16 + c_row(lane, i), j = (nt0 + t) * 8 + c_n(lane, i);
      partials[(chunk * n_pad + j) * rows_pad + r] = c[t][i];
    }
  }
}

// y[j][r] = the chunks' partial sums added in order.
__global__ void sum_chunks_kernel(const float* __restrict__ partials, int64_t chunks, int64_t n, int64_t rows,
                                  int64_t rows_pad, int64_t n_pad, float* __restrict__ y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * rows) return;
  const int64_t j = i / rows, r = i % rows;
  float total = partials[j * rows_pad + r];
  for (int64_t c = 1; c < chunks; ++c) total = total + partials[(c * n_pad + j) * rows_pad + r];
  y[i] = total;
}

// F32 weights: a warp per (row, input), lane l summing columns l, l + 32, ...
// with fused multiply-adds, then a fixed butterfly.
__global__ void linear_f32_kernel(const float* __restrict__ w, int64_t rows, int64_t cols,
                                  const float* __restrict__ x, int64_t n, float* __restrict__ y) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (warp >= rows * n) return;
  const int lane = threadIdx.x % 32;
  const int64_t j = warp / rows, r = warp % rows;
  float acc = 0.0f;
  for (int64_t k = lane; k < cols; k += 32) acc = fmaf(w[r * cols + k], x[j * cols + k], acc);
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(kFull, acc, o);
  if (lane == 0) y[j * rows + r] = acc;
}

bool is_tiled(WType t) { return t == WType::BF16 || t == WType::F16; }
bool is_k(WType t) { return t == WType::Q4_K || t == WType::Q6_K; }

}  // namespace

const char* gpu_weight_types() { return "bf16, f16, f32, q8_0, q4_k and q6_k (llama.cpp's Q4_K_M files)"; }

bool gpu_runs(WType t) {
  return t == WType::BF16 || t == WType::F16 || t == WType::F32 || t == WType::Q8_0 || t == WType::Q4_K ||
         t == WType::Q6_K;
}

bool same_preparation(const DeviceMatrix& a, const DeviceMatrix& b) {
  if (a.cols != b.cols) return false;
  if (is_k(a.type) && is_k(b.type)) return true;
  return a.type == b.type && a.type != WType::F32;
}

ScratchNeed linear_scratch(const DeviceMatrix& w, int64_t n) {
  ScratchNeed s;
  if (w.type == WType::Q8_0) {
    s.xq = static_cast<size_t>(n * w.cols);
    s.xd = static_cast<size_t>(n * (w.cols / kQ8)) * sizeof(float);
  } else if (is_k(w.type)) {
    s.xq = static_cast<size_t>(n * w.cols);
    s.xd = static_cast<size_t>(n * (w.cols / kSuper)) * sizeof(float);
    s.bsums = static_cast<size_t>(n * (w.cols / kSuper) * 16) * sizeof(int16_t);
  } else if (is_tiled(w.type)) {
    const int64_t n_pad = ceil_div(n, 8) * 8, cols_pad = ceil_div(w.cols, 16) * 16;
    const int64_t rows_pad = ceil_div(w.rows, 16) * 16, chunks = ceil_div(cols_pad, kFloatChunk);
    s.xt = static_cast<size_t>(n_pad * cols_pad) * sizeof(uint16_t);
    s.partials = static_cast<size_t>(chunks * n_pad * rows_pad) * sizeof(float);
  }
  return s;
}

void linear(const DeviceMatrix& w, const float* x, int64_t n, float* y, LinearScratch& scratch, bool prepared,
            cudaStream_t stream) {
  if (n == 0 || w.rows == 0) return;
  const int threads = kWarps * 32;
  switch (w.type) {
    case WType::Q8_0:
    case WType::Q4_K:
    case WType::Q6_K: {
      const bool k = is_k(w.type);
      const int64_t block_weights = k ? kSuper : kQ8;
      if (w.cols % block_weights != 0)
        throw Error(std::string("cuda linear: ") + wtype_name(w.type) + " rows need a multiple of " +
                    std::to_string(block_weights) + " columns");
      auto* xq = scratch.xq.as<int8_t>();
      auto* xd = scratch.xd.as<float>();
      auto* bs = scratch.bsums.as<int16_t>();
      if (!prepared) {
        const int64_t warps = n * (w.cols / block_weights);
        if (k)
          launch(quantize_q8k_kernel, ceil_div(warps * 32, threads), threads, 0, stream, x, n, w.cols, xq, xd, bs);
        else
          launch(quantize_q8_kernel, ceil_div(warps * 32, threads), threads, 0, stream, x, n, w.cols, xq, xd);
        check_launch("quantize activations");
      }
      if (quant_path(w.type, n) == QuantPath::kMma) {
        // Inputs a block carries: the fewest 8-tiles that cover n, up to 4.
        const int64_t tiles = ceil_div(n, 8);
        const int nt = tiles <= 1 ? 1 : tiles <= 2 ? 2 : 4;
        const dim3 grid(static_cast<unsigned>(ceil_div(w.rows, 16)), static_cast<unsigned>(ceil_div(tiles, nt)));
#define SPLITSPEC_KMMA(T, NT) launch(linear_kquant_mma_kernel<T, NT>, grid, threads, 0, stream, w, n, xq, xd, bs, y)
        if (w.type == WType::Q4_K) {
          if (nt == 1) SPLITSPEC_KMMA(WType::Q4_K, 1);
          else if (nt == 2) SPLITSPEC_KMMA(WType::Q4_K, 2);
          else SPLITSPEC_KMMA(WType::Q4_K, 4);
        } else {
          if (nt == 1) SPLITSPEC_KMMA(WType::Q6_K, 1);
          else if (nt == 2) SPLITSPEC_KMMA(WType::Q6_K, 2);
          else SPLITSPEC_KMMA(WType::Q6_K, 4);
        }
#undef SPLITSPEC_KMMA
        check_launch("linear (K-quant tensor cores)");
        return;
      }
      const dim3 grid(static_cast<unsigned>(ceil_div(w.rows, kWarps)), static_cast<unsigned>(ceil_div(n, kTokensPerWarp)));
      if (w.type == WType::Q8_0)
        launch(linear_quant_kernel<WType::Q8_0>, grid, threads, 0, stream, w, n, xq, xd, bs, y);
      else if (w.type == WType::Q4_K)
        launch(linear_quant_kernel<WType::Q4_K>, grid, threads, 0, stream, w, n, xq, xd, bs, y);
      else
        launch(linear_quant_kernel<WType::Q6_K>, grid, threads, 0, stream, w, n, xq, xd, bs, y);
      check_launch("linear (quantized)");
      return;
    }
    case WType::BF16:
    case WType::F16: {
      const bool bf16 = w.type == WType::BF16;
      const int64_t n_pad = ceil_div(n, 8) * 8, cols_pad = ceil_div(w.cols, 16) * 16;
      const int64_t m_tiles = ceil_div(w.rows, 16), k_tiles = cols_pad / 16, n_tiles = n_pad / 8;
      const int64_t rows_pad = m_tiles * 16, chunks = ceil_div(cols_pad, kFloatChunk);
      auto* xt = scratch.xt.as<uint16_t>();
      auto* partials = scratch.partials.as<float>();
      if (!prepared) {
        const int64_t count = n_pad * cols_pad;
        if (bf16)
          launch(tile_inputs_kernel<true>, ceil_div(count, 256), 256, 0, stream, x, n, w.cols, n_pad, cols_pad, xt);
        else
          launch(tile_inputs_kernel<false>, ceil_div(count, 256), 256, 0, stream, x, n, w.cols, n_pad, cols_pad, xt);
        check_launch("tile inputs");
      }
      // Inputs a thread block carries: the fewest tiles that cover n, up to 8
      // (64 inputs); more inputs take more blocks. Any split gives the same
      // bits: each output's sums do not depend on it.
      const int nt = n_tiles <= 1 ? 1 : n_tiles <= 2 ? 2 : n_tiles <= 4 ? 4 : 8;
      const dim3 grid(static_cast<unsigned>(ceil_div(m_tiles, kWarps)), static_cast<unsigned>(chunks),
                      static_cast<unsigned>(ceil_div(n_tiles, nt)));
      const auto* wt = static_cast<const uint16_t*>(w.q);
#define SPLITSPEC_MMA(B, NT) \
  launch(linear_mma_kernel<B, NT>, grid, threads, 0, stream, wt, m_tiles, k_tiles, xt, n_tiles, partials, rows_pad, n_pad)
      if (bf16) {
        if (nt == 1) SPLITSPEC_MMA(true, 1);
        else if (nt == 2) SPLITSPEC_MMA(true, 2);
        else if (nt == 4) SPLITSPEC_MMA(true, 4);
        else SPLITSPEC_MMA(true, 8);
      } else {
        if (nt == 1) SPLITSPEC_MMA(false, 1);
        else if (nt == 2) SPLITSPEC_MMA(false, 2);
        else if (nt == 4) SPLITSPEC_MMA(false, 4);
        else SPLITSPEC_MMA(false, 8);
      }
#undef SPLITSPEC_MMA
      check_launch("linear (tensor cores)");
      launch(sum_chunks_kernel, ceil_div(n * w.rows, 256), 256, 0, stream, partials, chunks, n, w.rows, rows_pad, n_pad, y);
      check_launch("linear (chunk sums)");
      return;
    }
    case WType::F32: {
      const int64_t warps = w.rows * n;
      launch(linear_f32_kernel, ceil_div(warps * 32, threads), threads, 0, stream, static_cast<const float*>(w.q), w.rows,
                                                                            w.cols, x, n, y);
      check_launch("linear (f32)");
      return;
    }
    default:
      throw Error(std::string("cuda linear: ") + wtype_name(w.type) + " weights do not run on the GPU (it runs " +
                  gpu_weight_types() + ")");
  }
}

}  // namespace splitspec::cuda

// linear() for AVX2 + FMA + F16C. Built with -mavx2 -mfma -mf16c
// -ffp-contract=off; see linear.h for the one definition every output
// follows, whatever the blocking below.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/kernels/avx2_reduce.h"
#include "common/kernels/linear_isa.h"

namespace splitspec::kernels::avx2 {

namespace {

// Eight weights as floats, exactly (half and bfloat16 widen without rounding).
template <WType T>
struct Weights;
template <>
struct Weights<WType::F32> {
  using E = float;
  static __m256 load(const E* p) { return _mm256_loadu_ps(p); }
};
template <>
struct Weights<WType::F16> {
  using E = uint16_t;
  static __m256 load(const E* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};
template <>
struct Weights<WType::BF16> {
  using E = uint16_t;
  static __m256 load(const E* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
};

// The last 1-7 weights of a row, zero-padded to eight.
template <WType T>
__m256 load_tail(const typename Weights<T>::E* p, int64_t rem) {
  typename Weights<T>::E padded[8] = {};
  std::memcpy(padded, p, rem * sizeof(padded[0]));
  return Weights<T>::load(padded);
}

// Partial sums for y[j][r] over inputs [k0, k1) of R weight rows and N input
// rows, continuing from `partial` unless `first`, ending in y if `last`.
// Partial sums round-trip through memory exactly, so the k-blocking does not
// change a lane's sequence of multiply-adds.
template <WType T, int R, int N>
void float_block(const float* x, int64_t in, const typename Weights<T>::E* w, int64_t k0, int64_t k1, float* partial,
                 bool first, bool last, float* y, int64_t out) {
  using E = typename Weights<T>::E;
  __m256 acc[R][N];
  // Unrolled by pragma, not left to -O3: at -O2 GCC kept the accumulators in
  // memory (2.6-3x slower).
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) acc[r][j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(partial + (r * N + j) * 8);
  const int64_t full = k0 + ((k1 - k0) & ~int64_t{7});
  // The next R rows start right after these; requesting them a block ahead
  // keeps memory busy while this block computes.
  const char* next = reinterpret_cast<const char*>(w + 2 * R * in);
  for (int64_t i = k0; i < full; i += 8) {
    _mm_prefetch(next + sizeof(E) * R * i, _MM_HINT_T1);
    if (R * sizeof(E) > 8) _mm_prefetch(next + sizeof(E) * R * i + 64, _MM_HINT_T1);
    __m256 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = Weights<T>::load(w + r * in + i);
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) {
      const __m256 xv = _mm256_loadu_ps(x + j * in + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);
    }
  }
  if (full < k1) {
    const __m256i m = tail_mask(k1 - full);
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_tail<T>(w + r * in + full, k1 - full);
    for (int j = 0; j < N; ++j) {
      const __m256 xv = _mm256_maskload_ps(x + j * in + full, m);
      for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < N; ++j) {
      if (last)
        y[j * out + r] = hsum(acc[r][j]);
      else
        _mm256_storeu_ps(partial + (r * N + j) * 8, acc[r][j]);
    }
}

// Register blocking: R weight rows x N input rows of 8-lane accumulators.
// Loads, not multiply-adds, bound this loop, so each loaded vector is reused
// as often as 16 registers allow: 3 x 4 accumulators + 3 weights + 1 input.
// A single input row (a decode step) is bandwidth-bound instead and streams 4
// weight rows at once.
constexpr int kInputsPerBlock = 4;
// Inputs per k-block: R weight rows and N input rows of this many floats
// (7 x 768 x 4 bytes = 21 KiB) stay in a 32 KiB L1 while all input chunks
// pass over them.
constexpr int64_t kBlockIn = 768;

template <WType T, int R>
void float_rows(const float* x, int64_t n, int64_t in, const typename Weights<T>::E* w, int64_t out, float* y,
                std::vector<float>& partial) {
  partial.resize(static_cast<size_t>(R * kInputsPerBlock * 8 * ((n + kInputsPerBlock - 1) / kInputsPerBlock)));
  for (int64_t k0 = 0; k0 < in; k0 += kBlockIn) {
    const int64_t k1 = std::min(in, k0 + kBlockIn);
    const bool first = k0 == 0, last = k1 == in;
    for (int64_t j = 0; j < n; j += kInputsPerBlock) {
      const float* xj = x + j * in;
      float* yj = y + j * out;
      float* pj = partial.data() + R * 8 * j;
      switch (std::min<int64_t>(kInputsPerBlock, n - j)) {
        case 1: float_block<T, R, 1>(xj, in, w, k0, k1, pj, first, last, yj, out); break;
        case 2: float_block<T, R, 2>(xj, in, w, k0, k1, pj, first, last, yj, out); break;
        case 3: float_block<T, R, 3>(xj, in, w, k0, k1, pj, first, last, yj, out); break;
        default: float_block<T, R, 4>(xj, in, w, k0, k1, pj, first, last, yj, out); break;
      }
    }
  }
}

template <WType T>
void float_linear(const LinearCall& c, int64_t r0, int64_t r1) {
  thread_local std::vector<float> partial;
  using E = typename Weights<T>::E;
  const auto* w = static_cast<const E*>(c.w.data);
  const int64_t in = c.w.cols, out = c.w.rows;
  const int64_t step = c.n == 1 ? 4 : 3;
  int64_t r = r0;
  for (; r + step <= r1; r += step) {
    if (step == 4)
      float_rows<T, 4>(c.x, c.n, in, w + r * in, out, c.y + r, partial);
    else
      float_rows<T, 3>(c.x, c.n, in, w + r * in, out, c.y + r, partial);
  }
  for (; r < r1; ++r) float_rows<T, 1>(c.x, c.n, in, w + r * in, out, c.y + r, partial);
}

// Offsets within a packed block of 16 rows (weight_type.h): the rows' m's
// and qh's after their d's, and the quant pieces after the header.
template <WType T>
constexpr int64_t kMinAt = 2 * kPackRows;
template <WType T>
constexpr int64_t kQhAt = (block_has_min(T) ? 4 : 2) * kPackRows;
template <WType T>
constexpr int64_t kPiecesAt = (block_bytes(T) - block_quant_bytes(T)) * kPackRows;
// What the unsigned quants of Q4_0 and Q5_0 stand above their weights.
template <WType T>
constexpr int32_t kOffset = T == WType::Q4_0 ? 8 : T == WType::Q5_0 ? 16 : 0;

// A packed block's eight 4-byte pieces of eight rows (half h), one row per
// lane: Q8_0's as stored (signed), IQ4_NL's nibbles as their grid values
// (signed), the others' unsigned quants (Q5's with the fifth bit, from qh
// as packed_qh lays it out).
template <WType T>
inline void block_pieces(const uint8_t* blk, int h, __m256i w[8]) {
  const uint8_t* quants = blk + kPiecesAt<T> + 32 * h;
  if constexpr (T == WType::Q8_0) {
    for (int k = 0; k < 8; ++k) w[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 64 * k));
    return;
  }
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  for (int k = 0; k < 4; ++k) {
    const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 64 * k));
    w[k] = _mm256_and_si256(p, low4);
    w[k + 4] = _mm256_and_si256(_mm256_srli_epi16(p, 4), low4);
  }
  if constexpr (block_has_high_bits(T)) {
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQhAt<T> + 32 * h));
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    // Shifts by a constant each: the loop is unrolled.
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      w[k] = _mm256_or_si256(w[k], _mm256_and_si256(_mm256_sll_epi32(qh, _mm_cvtsi32_si128(4 - k)), bit4));
      w[k + 4] = _mm256_or_si256(w[k + 4], _mm256_and_si256(_mm256_srl_epi32(qh, _mm_cvtsi32_si128(k)), bit4));
    }
  }
  if constexpr (T == WType::IQ4_NL) {
    const __m256i grid = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)));
    for (int k = 0; k < 8; ++k) w[k] = _mm256_shuffle_epi8(grid, w[k]);
  }
}

// Each row's exact block sum of weight times input (the weights from
// block_pieces, the input block's 32 bytes as eight 4-byte pieces `x` and
// its sum). Unsigned nibbles go through maddubs, whose 16-bit pair sums stay
// exact across eight 4-bit pieces (at most 8 x 2 x 15 x 127) or four 5-bit
// ones (4 x 2 x 31 x 127); signed weights (Q8_0, IQ4_NL) multiply |w| by the
// input carrying w's sign, one piece at a time (a pair can reach 2 x 128 x
// 127). Then less the offset times the input's sum.
template <WType T>
inline __m256i block_sums(const __m256i w[8], const int32_t* x, int32_t xsum) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (T == WType::Q8_0 || T == WType::IQ4_NL) {
    __m256i sums = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      const __m256i xk = _mm256_set1_epi32(x[k]);
      const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w[k], w[k]), _mm256_sign_epi8(xk, w[k]));
      sums = _mm256_add_epi32(sums, _mm256_madd_epi16(p, ones));
    }
    return sums;
  } else {
    constexpr int kRun = block_has_high_bits(T) ? 4 : 8;  // pieces per 16-bit run
    __m256i sums = _mm256_set1_epi32(-kOffset<T> * xsum);
    for (int k0 = 0; k0 < 8; k0 += kRun) {
      __m256i pairs = _mm256_maddubs_epi16(w[k0], _mm256_set1_epi32(x[k0]));
      for (int k = k0 + 1; k < k0 + kRun; ++k)
        pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(w[k], _mm256_set1_epi32(x[k])));
      sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, ones));
    }
    return sums;
  }
}

// Packed 32-weight blocks (weight_type.h), eight rows a register: halves h0
// .. h0 + H - 1 of the group at `r`, block by block, each row's lane
// gathering its exact block sum over the eight 4-byte pieces, then the
// float steps of linear.h in its order.
template <WType T, int N, int H>
void quant_halves(const LinearCall& c, int64_t r, int h0, int64_t j) {
  const QuantizedRows& qx = *c.qx;
  const int64_t nb = qx.blocks;
  const PackedBlocks g = packed_blocks(c.w, r);
  __m256 acc[H][N];
  for (int hh = 0; hh < H; ++hh)
    for (int jj = 0; jj < N; ++jj) acc[hh][jj] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g.block(b);
    // On the group's first pass only: the later ones find the bytes cached.
    // A pair's first group asks for both groups' blocks.
    if (h0 == 0 && j == 0 && g.leads) prefetch_ahead(blk, g.stride);
    for (int hh = 0; hh < H; ++hh) {
      const int h = h0 + hh;
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
      __m256 mw = _mm256_setzero_ps();
      if constexpr (block_has_min(T))
        mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kMinAt<T> + 16 * h)));
      __m256i w[8];
      block_pieces<T>(blk, h, w);
      for (int jj = 0; jj < N; ++jj) {
        const int64_t row = (j + jj) * nb + b;
        const auto* x = reinterpret_cast<const int32_t*>(qx.q.data() + row * kQBlock);
        const __m256i sums = block_sums<T>(w, x, qx.sum[row]);
        const __m256 xd = _mm256_set1_ps(qx.d[row]);
        acc[hh][jj] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(dw, xd), acc[hh][jj]);
        if constexpr (block_has_min(T))
          acc[hh][jj] = _mm256_fmadd_ps(mw, _mm256_set1_ps(qx.s[row]), acc[hh][jj]);
      }
    }
  }
  for (int hh = 0; hh < H; ++hh)
    for (int jj = 0; jj < N; ++jj) _mm256_storeu_ps(c.y + (j + jj) * c.w.rows + r + 8 * (h0 + hh), acc[hh][jj]);
}

template <WType T>
void quant_linear(const LinearCall& c, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r += kPackRows) {
    // One or two activation rows take both halves of each block in turn,
    // so the weights stream from memory once while the products run; more
    // rows would spill the accumulators, and take a pass per half (the
    // second finds the group in the cache).
    if (c.n == 1) {
      quant_halves<T, 1, 2>(c, r, 0, 0);
      continue;
    }
    if (c.n == 2) {
      quant_halves<T, 2, 2>(c, r, 0, 0);
      continue;
    }
    for (int h = 0; h < 2; ++h) {
      int64_t j = 0;
      for (; j + 4 <= c.n; j += 4) quant_halves<T, 4, 1>(c, r, h, j);
      switch (c.n - j) {
        case 3: quant_halves<T, 3, 1>(c, r, h, j); break;
        case 2: quant_halves<T, 2, 1>(c, r, h, j); break;
        case 1: quant_halves<T, 1, 1>(c, r, h, j); break;
        default: break;
      }
    }
  }
}

}  // namespace

void quantize_activations(const float* x, int64_t rows, int64_t cols, QuantizedRows& out) {
  size_quantized(rows, cols, out);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < out.blocks; ++b) {
      const float* v = x + r * cols + b * kQBlock;
      __m256 in[4], amax = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        in[i] = _mm256_loadu_ps(v + 8 * i);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, in[i]));
      }
      __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
      m = _mm_max_ps(m, _mm_movehl_ps(m, m));
      m = _mm_max_ss(m, _mm_movehdup_ps(m));
      // As quantize_block: the same division, reciprocal and rounding.
      const float scale = _mm_cvtss_f32(m) / 127.0f;
      const float id = scale != 0.0f ? 1.0f / scale : 0.0f;
      const int64_t i = r * out.blocks + b;
      out.d[i] = _cvtsh_ss(_cvtss_sh(scale, _MM_FROUND_TO_NEAREST_INT));
      const __m256 vid = _mm256_set1_ps(id);
      __m256i q[4];
      for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(in[k], vid));  // nearest, ties to even
      __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
      out.sum[i] = _mm_cvtsi128_si32(s4);
      out.s[i] = _cvtsh_ss(_cvtss_sh(scale * static_cast<float>(out.sum[i]), _MM_FROUND_TO_NEAREST_INT));
      // Packing narrows within 128-bit lanes; the permute restores the order.
      const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.data() + r * cols + b * kQBlock),
                          _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
}

void linear_rows(const LinearCall& c, int64_t r0, int64_t r1) {
  switch (c.w.type) {
    case WType::F32: float_linear<WType::F32>(c, r0, r1); break;
    case WType::F16: float_linear<WType::F16>(c, r0, r1); break;
    case WType::BF16: float_linear<WType::BF16>(c, r0, r1); break;
    case WType::Q8_0: quant_linear<WType::Q8_0>(c, r0, r1); break;
    case WType::Q4_0: quant_linear<WType::Q4_0>(c, r0, r1); break;
    case WType::Q4_1: quant_linear<WType::Q4_1>(c, r0, r1); break;
    case WType::Q5_0: quant_linear<WType::Q5_0>(c, r0, r1); break;
    case WType::Q5_1: quant_linear<WType::Q5_1>(c, r0, r1); break;
    case WType::IQ4_NL: quant_linear<WType::IQ4_NL>(c, r0, r1); break;
    default: break;  // super-blocks never come here: linear() runs them itself
  }
}

}  // namespace splitspec::kernels::avx2

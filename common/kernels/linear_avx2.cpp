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

// Piece k (0..7) of half h of a packed block: eight rows' 4-byte pieces,
// one row per lane. Q8_0's as stored (signed), IQ4_NL's nibbles as their
// grid values (signed), the others' unsigned quants (Q5's with the fifth
// bit, from qh as packed_qh lays it out). Pieces k and k + 4 are the low and
// high nibbles of one load.
template <WType T>
inline __m256i block_piece(const uint8_t* blk, int h, int k) {
  const uint8_t* quants = blk + kPiecesAt<T> + 32 * h;
  if constexpr (T == WType::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 64 * k));
  } else {
    const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 64 * (k % 4)));
    __m256i w = _mm256_and_si256(k < 4 ? p : _mm256_srli_epi16(p, 4), _mm256_set1_epi8(0x0f));
    if constexpr (block_has_high_bits(T)) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQhAt<T> + 32 * h));
      const __m256i fifth = k < 4 ? _mm256_sll_epi32(qh, _mm_cvtsi32_si128(4 - k)) : _mm256_srl_epi32(qh, _mm_cvtsi32_si128(k - 4));
      w = _mm256_or_si256(w, _mm256_and_si256(fifth, _mm256_set1_epi8(0x10)));
    }
    if constexpr (T == WType::IQ4_NL)
      w = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values))), w);
    return w;
  }
}

// Activation rows j .. j + N - 1 times the packed group of 16 weight rows
// at `r`, eight rows a register, in one pass over the group's blocks. Each
// piece of weights is decoded once and multiplied by every row's piece of
// input (broadcast) before the next, so the weights stream from memory once
// while every row's products run, and a half holds N accumulators of
// products in registers (the 2N of floats live in memory). Each row's lane
// gathers its exact block sum: unsigned nibbles through maddubs, whose
// 16-bit pair sums stay exact across eight 4-bit pieces (at most 8 x 2 x 15
// x 127) or four 5-bit ones (4 x 2 x 31 x 127), less the offset times the
// input's sum; signed weights (Q8_0, IQ4_NL) multiply |w| by the input
// carrying w's sign, a piece at a time (a pair can reach 2 x 128 x 127).
// Then the float steps of linear.h, in its order.
template <WType T, int N>
void quant_rows(const LinearCall& c, int64_t r, int64_t j) {
  const QuantizedRows& qx = *c.qx;
  const int64_t nb = qx.blocks;
  const PackedBlocks g = packed_blocks(c.w, r);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[2][N];
  for (int h = 0; h < 2; ++h)
    for (int jj = 0; jj < N; ++jj) acc[h][jj] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g.block(b);
    // A pair's first group asks for both groups' blocks; later rows find
    // them cached.
    if (j == 0 && g.leads) prefetch_ahead(blk, g.stride);
    const int32_t* x[N];
    for (int jj = 0; jj < N; ++jj) x[jj] = reinterpret_cast<const int32_t*>(qx.q.data() + ((j + jj) * nb + b) * kQBlock);
    for (int h = 0; h < 2; ++h) {
      // The halves broadcast the same input pieces: left to itself, GCC
      // keeps all 8N broadcasts from the first half for the second, and
      // spills them. Opaque pointers make each half broadcast its own.
      for (int jj = 0; jj < N; ++jj) asm("" : "+r"(x[jj]));
      __m256i sums[N];
      if constexpr (T == WType::Q8_0 || T == WType::IQ4_NL) {
        for (int jj = 0; jj < N; ++jj) sums[jj] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          const __m256i w = block_piece<T>(blk, h, k), magnitude = _mm256_sign_epi8(w, w);
          for (int jj = 0; jj < N; ++jj) {
            const __m256i p = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(_mm256_set1_epi32(x[jj][k]), w));
            sums[jj] = _mm256_add_epi32(sums[jj], _mm256_madd_epi16(p, ones));
            asm("" : "+x"(sums[jj]));  // as pairs below
          }
        }
      } else {
        constexpr int kRun = block_has_high_bits(T) ? 4 : 8;  // pieces per 16-bit run
        for (int jj = 0; jj < N; ++jj) sums[jj] = _mm256_set1_epi32(-kOffset<T> * qx.sum[(j + jj) * nb + b]);
#pragma GCC unroll 2
        for (int k0 = 0; k0 < 8; k0 += kRun) {
          __m256i pairs[N];
#pragma GCC unroll 8
          for (int k = k0; k < k0 + kRun; ++k) {
            const __m256i w = block_piece<T>(blk, h, k);
            for (int jj = 0; jj < N; ++jj) {
              const __m256i p = _mm256_maddubs_epi16(w, _mm256_set1_epi32(x[jj][k]));
              pairs[jj] = k == k0 ? p : _mm256_add_epi16(pairs[jj], p);
              // Each sum as it comes: GCC reassociates the run's adds into a
              // tree, which holds every product of the run at once (8N
              // registers, spilled), 1.4x the time at 8 rows.
              asm("" : "+x"(pairs[jj]));
            }
          }
          for (int jj = 0; jj < N; ++jj) sums[jj] = _mm256_add_epi32(sums[jj], _mm256_madd_epi16(pairs[jj], ones));
        }
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
      __m256 mw = _mm256_setzero_ps();
      if constexpr (block_has_min(T))
        mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kMinAt<T> + 16 * h)));
      for (int jj = 0; jj < N; ++jj) {
        const int64_t row = (j + jj) * nb + b;
        acc[h][jj] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[jj]), _mm256_mul_ps(dw, _mm256_set1_ps(qx.d[row])), acc[h][jj]);
        if constexpr (block_has_min(T)) acc[h][jj] = _mm256_fmadd_ps(mw, _mm256_set1_ps(qx.s[row]), acc[h][jj]);
      }
    }
  }
  for (int h = 0; h < 2; ++h)
    for (int jj = 0; jj < N; ++jj) _mm256_storeu_ps(c.y + (j + jj) * c.w.rows + r + 8 * h, acc[h][jj]);
}

template <WType T>
void quant_linear(const LinearCall& c, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r += kPackRows) {
    int64_t j = 0;
    for (; j + 8 <= c.n; j += 8) quant_rows<T, 8>(c, r, j);
    switch (c.n - j) {
      case 7: quant_rows<T, 7>(c, r, j); break;
      case 6: quant_rows<T, 6>(c, r, j); break;
      case 5: quant_rows<T, 5>(c, r, j); break;
      case 4: quant_rows<T, 4>(c, r, j); break;
      case 3: quant_rows<T, 3>(c, r, j); break;
      case 2: quant_rows<T, 2>(c, r, j); break;
      case 1: quant_rows<T, 1>(c, r, j); break;
      default: break;
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

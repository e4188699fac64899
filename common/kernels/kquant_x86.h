#pragma once
// The skeleton of the x86 K-quant bodies (kquant_avx2.cpp, kquant_avx512.cpp),
// included by each and so built with each body's flags: eight weight rows at
// a time, one per lane of the float accumulators, against up to eight
// activation rows. A body supplies only the integer products,
// Body::sums<T, N>(block, sc, xq, a) (sc: Q4_K's and Q5_K's eight 6-bit
// scales, decoded here once): for each activation row i, an 8-lane int32
// vector whose lanes add up to the sum over the super-block's sub-blocks of
// scale x (quant . input), Q6_K's quants as stored (the weights plus 32)
// and Q3_K's as the weights plus 4, IQ4_XS's as its grid values. Everything
// else is here, once: those
// offsets, the mins, and the float operations, lane-wise the ones of
// kquant.h's kquant_dots in its order, so every body gives the reference's
// bits. Internal to those two files.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "common/kernels/kquant.h"
#include "common/kernels/linear_isa.h"

namespace splitspec::kernels {
namespace {

// Q4_K's and Q5_K's twelve bytes of scales and mins as eight 6-bit scales
// (bytes of sc) and eight 6-bit mins (bytes of m), four at a time.
inline void scales_mins(const uint8_t* s, uint8_t sc[8], uint8_t m[8]) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x03030303;
  const uint32_t v[4] = {u[0] & low6, (u[2] & low4) | (((u[0] >> 6) & top2) << 4), u[1] & low6,
                         ((u[2] >> 4) & low4) | (((u[1] >> 6) & top2) << 4)};
  std::memcpy(sc, v, 8);
  std::memcpy(m, v + 2, 8);
}

// Q3_K's sixteen 6-bit scales as signed bytes: low 4 bits from bytes 0-7
// (low nibbles for scales 0-7, high for 8-15), top 2 bits from bytes 8-11
// (scale j's in byte 8 + j % 4, bits 2(j / 4)), less 32. In registers
// throughout: bytes stored in parts and loaded whole are not forwarded, and
// that stall was half this type's time.
inline __m128i q3k_scales(const uint8_t* s) {
  const __m128i low = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)), nib = _mm_set1_epi8(0x0F);
  const __m128i low4 = _mm_unpacklo_epi64(_mm_and_si128(low, nib), _mm_and_si128(_mm_srli_epi16(low, 4), nib));
  uint32_t top;
  std::memcpy(&top, s + 8, 4);
  const __m128i top2 = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(top)), _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(3));
  return _mm_sub_epi8(_mm_or_si128(low4, _mm_slli_epi16(top2, 4)), _mm_set1_epi8(32));
}

// IQ4_XS's eight scales (less 32) as signed bytes.
inline __m128i iq4xs_scales(const uint8_t* b) {
  alignas(16) int8_t sc[16] = {};
  for (int s = 0; s < 8; ++s) sc[s] = static_cast<int8_t>(iq4xs_scale(b, s));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(sc));
}

// kIq4Values in each 128-bit lane, for pshufb.
inline __m256i iq4_grid() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)));
}

// Lane r: the sum of v[r]'s eight lanes (integer adds: exact in any order).
inline __m256i sum_each(const __m256i v[8]) {
  const __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

// Lane r: the sum of v[r]'s four lanes.
inline __m256i sum_each(const __m128i v[8]) {
  const __m128i lo = _mm_hadd_epi32(_mm_hadd_epi32(v[0], v[1]), _mm_hadd_epi32(v[2], v[3]));
  const __m128i hi = _mm_hadd_epi32(_mm_hadd_epi32(v[4], v[5]), _mm_hadd_epi32(v[6], v[7]));
  return _mm256_set_m128i(hi, lo);
}

// The half-precision values at `p`, `p + step`, ... (`lanes` of them, the
// rest 0).
inline __m256 halves(const uint8_t* p, int64_t step, int lanes) {
  uint16_t h[8] = {};
  for (int r = 0; r < lanes; ++r) std::memcpy(&h[r], p + r * step, 2);
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

// `lanes` (1..8) weight rows, `rb` bytes apart, times N activation rows from
// j0: lane r of out[i * stride + r] is row r's kquant_dots output.
template <class Body, WType T, int N>
void rows8(const uint8_t* row0, int64_t rb, int lanes, int64_t cols, const Q8KRows& x, int64_t j0, float* out,
           int64_t stride) {
  constexpr int64_t sb = superblock_bytes(T);
  const int64_t nb = cols / kSuperBlock;
  __m256 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* xq[N];
    __m256i sums16[N];
    __m128i pairs[N];
    for (int i = 0; i < N; ++i) {
      xq[i] = x.q.data() + (j0 + i) * x.cols + b * kSuperBlock;
      sums16[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums.data() + ((j0 + i) * nb + b) * 16));
      // Each Q4_K/Q5_K min covers two 16-sums.
      if constexpr (T == WType::Q4_K || T == WType::Q5_K)
        pairs[i] = _mm_hadd_epi16(_mm256_castsi256_si128(sums16[i]), _mm256_extracti128_si256(sums16[i], 1));
    }
    __m256i sums[N][8];
    __m128i mins[N][8];
    for (int r = 0; r < 8; ++r) {
      if (r >= lanes) {
        for (int i = 0; i < N; ++i) {
          sums[i][r] = _mm256_setzero_si256();
          mins[i][r] = _mm_setzero_si128();
        }
        continue;
      }
      const uint8_t* block = row0 + r * rb + b * sb;
      prefetch_ahead(block, sb);
      // Q4_K's and Q5_K's scales and mins, decoded once for the body and the mins.
      uint8_t sc[8] = {}, m[8] = {};
      if constexpr (T == WType::Q4_K || T == WType::Q5_K) scales_mins(block + 4, sc, m);
      __m256i a[N];
      Body::template sums<T, N>(block, sc, xq, a);
      if constexpr (T == WType::Q6_K || T == WType::Q3_K) {
        // The body's quants are the weights plus 32 (Q6_K, as stored) or 4
        // (Q3_K): less that x scale x the 16-sums.
        const __m256i sc16 = _mm256_cvtepi8_epi16(T == WType::Q6_K ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 192))
                                                                   : q3k_scales(block + 96));
        constexpr int shift = T == WType::Q6_K ? 5 : 2;
        for (int i = 0; i < N; ++i)
          a[i] = _mm256_sub_epi32(a[i], _mm256_slli_epi32(_mm256_madd_epi16(sc16, sums16[i]), shift));
      } else if constexpr (T == WType::Q2_K) {
        // Sixteen 4-bit mins (the scale bytes' high nibbles), one a 16-sum.
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block));
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0F)));
        for (int i = 0; i < N; ++i) {
          const __m256i mm = _mm256_madd_epi16(m16, sums16[i]);
          mins[i][r] = _mm_add_epi32(_mm256_castsi256_si128(mm), _mm256_extracti128_si256(mm, 1));
        }
      } else if constexpr (superblock_has_mins(T)) {
        const __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)));
        for (int i = 0; i < N; ++i) mins[i][r] = _mm_madd_epi16(m16, pairs[i]);
      }
      for (int i = 0; i < N; ++i) sums[i][r] = a[i];
    }
    const uint8_t* first = row0 + b * sb;
    const __m256 d = halves(first + superblock_d_offset(T), rb, lanes);
    for (int i = 0; i < N; ++i) {
      const __m256 xd = _mm256_set1_ps(x.d[(j0 + i) * nb + b]);
      acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(d, xd), _mm256_cvtepi32_ps(sum_each(sums[i])), acc[i]);
    }
    if constexpr (superblock_has_mins(T)) {
      const __m256 dmin = halves(first + superblock_d_offset(T) + 2, rb, lanes);
      for (int i = 0; i < N; ++i) {
        const __m256 xd = _mm256_set1_ps(x.d[(j0 + i) * nb + b]);
        acc[i] = _mm256_fmadd_ps(_mm256_xor_ps(_mm256_mul_ps(dmin, xd), _mm256_set1_ps(-0.0f)),
                                 _mm256_cvtepi32_ps(sum_each(mins[i])), acc[i]);
      }
    }
  }
  for (int i = 0; i < N; ++i) {
    alignas(32) float v[8];
    _mm256_store_ps(v, acc[i]);
    for (int r = 0; r < lanes; ++r) out[i * stride + r] = v[r];
  }
}

template <class Body, WType T, int N>
void block_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, int64_t j0, float* y) {
  const int64_t rb = row_bytes(T, w.cols);
  for (int64_t r = r0; r < r1; r += 8)
    rows8<Body, T, N>(w.row(r), rb, static_cast<int>(std::min<int64_t>(8, r1 - r)), w.cols, x, j0,
                      y + j0 * w.rows + r, w.rows);
}

template <class Body, WType T>
void typed_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y) {
  static_assert(kMaxDotRows == 8);
  for (int64_t j = 0; j < x.rows; j += kMaxDotRows) {
    switch (std::min<int64_t>(kMaxDotRows, x.rows - j)) {
      case 1: block_rows<Body, T, 1>(w, r0, r1, x, j, y); break;
      case 2: block_rows<Body, T, 2>(w, r0, r1, x, j, y); break;
      case 3: block_rows<Body, T, 3>(w, r0, r1, x, j, y); break;
      case 4: block_rows<Body, T, 4>(w, r0, r1, x, j, y); break;
      case 5: block_rows<Body, T, 5>(w, r0, r1, x, j, y); break;
      case 6: block_rows<Body, T, 6>(w, r0, r1, x, j, y); break;
      case 7: block_rows<Body, T, 7>(w, r0, r1, x, j, y); break;
      default: block_rows<Body, T, 8>(w, r0, r1, x, j, y); break;
    }
  }
}

// Rows [r0, r1) of K-quant `w` times every row of `x`, with Body's integers;
// Q2_K and Q3_K with the avx2 body's where Body has none (Body::kLowBits).
template <class Body>
void kquant_rows_with(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y) {
  if constexpr (Body::kLowBits) {
    if (w.type == WType::Q2_K) return typed_rows<Body, WType::Q2_K>(w, r0, r1, x, y);
    if (w.type == WType::Q3_K) return typed_rows<Body, WType::Q3_K>(w, r0, r1, x, y);
  } else if (w.type == WType::Q2_K || w.type == WType::Q3_K) {
    return avx2::kquant_rows(w, r0, r1, x, y);
  }
  switch (w.type) {
    case WType::IQ4_XS: return typed_rows<Body, WType::IQ4_XS>(w, r0, r1, x, y);
    case WType::Q4_K: return typed_rows<Body, WType::Q4_K>(w, r0, r1, x, y);
    case WType::Q5_K: return typed_rows<Body, WType::Q5_K>(w, r0, r1, x, y);
    default: return typed_rows<Body, WType::Q6_K>(w, r0, r1, x, y);
  }
}

}  // namespace
}  // namespace splitspec::kernels

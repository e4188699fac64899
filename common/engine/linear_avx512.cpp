// linear() for Q8_0/Q4_0 weights with AVX-512 VNNI: two blocks per 512-bit
// register, one vpdpbusd for their 64 products. Built with -mavx512f
// -mavx512bw -mavx512dq -mavx512vl -mavx512vnni (plus the avx2 flags) and
// -ffp-contract=off. vpdpbusd multiplies unsigned by signed bytes, so the
// weights go in unsigned (Q8_0 + 128, Q4_0's nibbles as they are) and each
// lane starts from the activations' `start` (-offset * its four inputs'
// sum): the exact integer sums linear.h defines. The even block lands in the
// low eight lanes and the odd one in the high eight: its two accumulators in
// one register.
#include <immintrin.h>

// GCC 12's AVX-512 headers build their "undefined" vectors as `__Y = __Y`,
// which -Wall reports at every inlined insert.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstring>

#include "common/engine/linear_isa.h"

namespace splitspec::kernels::avx512 {

namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline uint16_t bits_of(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// Scales of blocks b and b + 1, eight lanes each.
template <WType T>
inline __m512 scale_pair(const uint8_t* blk) {
  const __m128i h = _mm_insert_epi16(_mm_cvtsi32_si128(bits_of(blk)), bits_of(blk + block_bytes(T)), 1);
  const __m512i lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(lanes, _mm512_zextps128_ps512(_mm_cvtph_ps(h)));
}

// Blocks b and b + 1 as 64 unsigned bytes.
template <WType T>
inline __m512i weight_pair(const uint8_t* blk) {
  constexpr int64_t bb = block_bytes(T);
  if (T == WType::Q8_0) {
    const __m512i w =
        _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2))),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + bb + 2)), 1);
    return _mm512_xor_si512(w, _mm512_set1_epi8(-128));
  }
  // [b's 16 bytes, b+1's 16 bytes] -> 128-bit lanes [b lo, b+1 lo, b hi, b+1 hi]
  // -> [b lo, b hi, b+1 lo, b+1 hi]: weights 0-15 and 16-31 of each block.
  const __m256i packed =
      _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(blk + bb + 2), reinterpret_cast<const __m128i*>(blk + 2));
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m512i both = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_and_si256(packed, low4)),
                                          _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4), 1);
  return _mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0));
}

// The last block of an odd count, as 32 unsigned bytes.
template <WType T>
inline __m256i weight_one(const uint8_t* blk) {
  if (T == WType::Q8_0)
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)), _mm256_set1_epi8(-128));
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0f));
}

template <WType T, int R, int N>
void quant_block(const LinearCall& c, int64_t r, int64_t j) {
  const QuantizedRows& qx = *c.qx;
  const int64_t nb = qx.blocks;
  constexpr int64_t bb = block_bytes(T);
  const uint8_t* wrow[R];
  for (int rr = 0; rr < R; ++rr) wrow[rr] = c.w.row(r + rr);
  __m512 acc[R][N];
  for (int rr = 0; rr < R; ++rr)
    for (int jj = 0; jj < N; ++jj) acc[rr][jj] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    __m512i wu[R];
    __m512 dw[R];
    for (int rr = 0; rr < R; ++rr) {
      wu[rr] = weight_pair<T>(wrow[rr] + b * bb);
      dw[rr] = scale_pair<T>(wrow[rr] + b * bb);
    }
    for (int jj = 0; jj < N; ++jj) {
      const int64_t row = (j + jj) * nb + b;
      const __m512i xq = _mm512_loadu_si512(qx.q.data() + row * kQBlock);
      const __m512i start = _mm512_loadu_si512(qx.start.data() + row * 8);
      const __m512 dx = _mm512_loadu_ps(qx.d8.data() + row * 8);
      for (int rr = 0; rr < R; ++rr) {
        const __m512i sums = _mm512_dpbusd_epi32(start, wu[rr], xq);
        acc[rr][jj] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(dw[rr], dx), acc[rr][jj]);
      }
    }
  }
  if (b < nb) {  // an odd last block: even, so the low lanes only
    for (int rr = 0; rr < R; ++rr) {
      const uint8_t* blk = wrow[rr] + b * bb;
      const __m256i wu = weight_one<T>(blk);
      const __m256 dw = _mm256_set1_ps(_cvtsh_ss(bits_of(blk)));
      for (int jj = 0; jj < N; ++jj) {
        const int64_t row = (j + jj) * nb + b;
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx.q.data() + row * kQBlock));
        const __m256i start = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx.start.data() + row * 8));
        const __m256 f = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(start, wu, xq));
        const __m256 d = _mm256_mul_ps(dw, _mm256_loadu_ps(qx.d8.data() + row * 8));
        acc[rr][jj] = _mm512_mask3_fmadd_ps(_mm512_zextps256_ps512(f), _mm512_zextps256_ps512(d), acc[rr][jj], 0x00ff);
      }
    }
  }
  for (int rr = 0; rr < R; ++rr)
    for (int jj = 0; jj < N; ++jj) {
      const __m512 a = acc[rr][jj];
      c.y[(j + jj) * c.w.rows + r + rr] = hsum(_mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)));
    }
}

// A decode step (one input row) streams four weight rows at once; verifying
// several rows reuses each weight register across four inputs.
template <WType T, int R>
void quant_rows(const LinearCall& c, int64_t r) {
  int64_t j = 0;
  for (; j + 4 <= c.n; j += 4) quant_block<T, R, 4>(c, r, j);
  switch (c.n - j) {
    case 3: quant_block<T, R, 3>(c, r, j); break;
    case 2: quant_block<T, R, 2>(c, r, j); break;
    case 1: quant_block<T, R, 1>(c, r, j); break;
    default: break;
  }
}

template <WType T>
void quant_linear(const LinearCall& c, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) quant_rows<T, 4>(c, r);
  for (; r < r1; ++r) quant_rows<T, 1>(c, r);
}

}  // namespace

void linear_rows(const LinearCall& c, int64_t r0, int64_t r1) {
  if (c.w.type == WType::Q8_0)
    quant_linear<WType::Q8_0>(c, r0, r1);
  else
    quant_linear<WType::Q4_0>(c, r0, r1);
}

}  // namespace splitspec::kernels::avx512

// The K-quant super-block sums (kquant.h) with AVX2: the same integers as
// superblock_sum, so kquant_dot gives the same bits. Built with -mavx2 and
// called only after linear.cpp's check for it.
#include <immintrin.h>

#include "common/engine/kquant.h"
#include "common/engine/linear_isa.h"

namespace splitspec::kernels::avx2 {

namespace {

int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// 32 unsigned quants times 32 inputs, each pair of products summed (at most
// 63 * 127 * 2: no int16 saturation), then times the pairs' scales and summed
// in pairs again into 8 int32 lanes.
__m256i scaled(__m256i q, const int8_t* x, __m256i scales16) {
  const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  return _mm256_madd_epi16(p, scales16);
}

void scale_min(int j, const uint8_t* s, int* sc) {
  *sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
}

}  // namespace

int32_t superblock_sum(WType t, const uint8_t* b, const int8_t* xq, const int16_t* bsums) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256i acc = _mm256_setzero_si256();
  if (t == WType::Q6_K) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    const __m256i three = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m256i lo0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h));
      const __m256i lo1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h + 32));
      const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 32 * h));
      // Weights 128h + 32k + l, as stored plus 32 (0..63).
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(lo0, low4), _mm256_slli_epi16(_mm256_and_si256(hi, three), 4)),
          _mm256_or_si256(_mm256_and_si256(lo1, low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 2), three), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo0, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 4), three), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo1, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 6), three), 4)),
      };
      for (int k = 0; k < 4; ++k) {
        const int s = 8 * h + 2 * k;  // the first 16 lanes' sub-block; the next 16 are s + 1
        const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(sc[s + 1]), _mm_set1_epi16(sc[s]));
        acc = _mm256_add_epi32(acc, scaled(q[k], xq + 128 * h + 32 * k, scales));
      }
    }
    // The stored quants are the weights plus 32.
    int32_t offset = 0;
    for (int s = 0; s < 16; ++s) offset += sc[s] * bsums[s];
    return hsum(acc) - 32 * offset;
  }
  const bool five = t == WType::Q5_K;
  const uint8_t* qs = b + (five ? 48 : 16);
  const __m256i hbits = five ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)) : _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi8(1);
  for (int j = 0; j < 4; ++j) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
    __m256i lo = _mm256_and_si256(bytes, low4), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
    if (five) {
      // Bit 2j of qh[l] is weight 64j + l's fifth bit, bit 2j + 1 weight 64j + 32 + l's.
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), one), 4));
    }
    int sc_lo, sc_hi;
    scale_min(2 * j, b + 4, &sc_lo);
    scale_min(2 * j + 1, b + 4, &sc_hi);
    acc = _mm256_add_epi32(acc, scaled(lo, xq + 64 * j, _mm256_set1_epi16(static_cast<int16_t>(sc_lo))));
    acc = _mm256_add_epi32(acc, scaled(hi, xq + 64 * j + 32, _mm256_set1_epi16(static_cast<int16_t>(sc_hi))));
  }
  return hsum(acc);
}

}  // namespace splitspec::kernels::avx2

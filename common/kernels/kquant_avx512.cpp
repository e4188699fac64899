// The K-quant integer products with AVX-512 (maddubs) and VNNI (vpdpwssd:
// the scale multiply, pair sum and accumulation in one), 64 weights an
// instruction, in the x86 skeleton
// (kquant_x86.h): the same integers as the reference, so the same bits.
// Built with the avx512 body's flags and called only after linear.cpp's
// check for them.
#include <immintrin.h>

// GCC 12's AVX-512 headers build their "undefined" vectors as `__Y = __Y`,
// which -Wall reports at every inlined conversion.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "common/kernels/kquant_x86.h"

namespace splitspec::kernels::avx512 {

namespace {

__m512i load64(const void* p) { return _mm512_loadu_si512(p); }

// The same 32 bytes in both halves.
__m512i twice(const uint8_t* p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

// Each 16-bit lane shifted right by `lo` in the lower half, `hi` in the upper.
__m512i shift_halves(__m512i v, int lo, int hi) {
  return _mm512_srlv_epi16(v, _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(lo)), _mm256_set1_epi16(static_cast<int16_t>(hi)), 1));
}

// Lane l (of 32 16-bit lanes) holds entry `first + l / PER` of `v`.
// PER (8 or 16) is known at compile time, so the lane pattern l / PER is a
// constant and only `first` is added per call.
template <int PER>
__m512i spread(__m512i v, int first) {
  static constexpr auto pattern = [] {
    struct {
      alignas(64) int16_t lane[32];
    } p{};
    for (int l = 0; l < 32; ++l) p.lane[l] = static_cast<int16_t>(l / PER);
    return p;
  }();
  const __m512i idx = _mm512_add_epi16(_mm512_load_si512(pattern.lane), _mm512_set1_epi16(static_cast<int16_t>(first)));
  return _mm512_permutexvar_epi16(idx, v);
}

struct Avx512 {
  // Q2_K and Q3_K run the avx2 body.
  static constexpr bool kLowBits = false;
  // Per 64 weights and activation row: maddubs (quant x input, pairs summed
  // into 16 bits: at most 2 x 63 x 128, no saturation), then vpdpwssd (times
  // each pair's scale, pairs summed, added to the int32 lanes).
  template <WType T, int N>
  static void sums(const uint8_t* b, const uint8_t* sc, const int8_t* const* xq, __m256i* a) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i acc[N];
    for (int i = 0; i < N; ++i) acc[i] = _mm512_setzero_si512();
    // The scales as 16-bit lanes.
    __m512i sc16;
    if constexpr (T == WType::Q6_K) {
      sc16 = _mm512_cvtepi8_epi16(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
    } else if constexpr (T == WType::IQ4_XS) {
      sc16 = _mm512_cvtepi8_epi16(_mm256_castsi128_si256(iq4xs_scales(b)));
    } else {
      sc16 = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
    }
    for (int u = 0; u < 4; ++u) {  // weights 64u .. 64u + 63
      __m512i q, scale;
      if constexpr (T == WType::IQ4_XS) {
        // Sub-blocks 2u and 2u + 1, 16 quant bytes each: the low nibbles of
        // the first 16 bytes, their high nibbles, then the same of the next
        // 16, as grid values. Signed, so |q| goes into maddubs and q's sign
        // onto the inputs (AVX-512 has no byte sign instruction).
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 8 + 32 * u));
        const __m256i lo = _mm256_and_si256(bytes, _mm256_set1_epi8(0x0F));
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi8(0x0F));
        const __m512i idx = _mm512_shuffle_i64x2(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                                                 _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                                                 _MM_SHUFFLE(3, 1, 2, 0));
        const __m512i v = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values))), idx);
        const __mmask64 negative = _mm512_movepi8_mask(v);
        scale = spread<16>(sc16, 2 * u);
        for (int i = 0; i < N; ++i) {
          const __m512i x = load64(xq[i] + 64 * u);
          const __m512i xs = _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
          acc[i] = _mm512_dpwssd_epi32(acc[i], _mm512_maddubs_epi16(_mm512_abs_epi8(v), xs), scale);
        }
        continue;
      }
      if constexpr (T == WType::Q6_K) {
        // Low (u even) or high nibbles of ql's 64 bytes at 64(u / 2), with
        // qh's bits 2k, 2k + 1 on top, k = 2(u % 2) in the lower half and
        // k + 1 in the upper; sub-blocks of 16 weights, 8 pair lanes each.
        const int h = u / 2, k = 2 * (u % 2);
        const __m512i lo = load64(b + 64 * h);
        const __m512i nib = _mm512_and_si512(u % 2 == 0 ? lo : _mm512_srli_epi16(lo, 4), low4);
        const __m512i hi = _mm512_and_si512(shift_halves(twice(b + 128 + 32 * h), 2 * k, 2 * k + 2), _mm512_set1_epi8(3));
        q = _mm512_or_si512(nib, _mm512_slli_epi16(hi, 4));
        scale = spread<8>(sc16, 4 * u);
      } else {
        // qs's 32 bytes at 32u: low nibbles (sub-block 2u) in the lower half,
        // high nibbles (2u + 1) in the upper; Q5_K's fifth bits are qh's bits
        // 2u and 2u + 1.
        constexpr bool five = T == WType::Q5_K;
        q = _mm512_and_si512(shift_halves(twice(b + (five ? 48 : 16) + 32 * u), 0, 4), low4);
        if constexpr (five) {
          const __m512i bit = _mm512_and_si512(shift_halves(twice(b + 16), 2 * u, 2 * u + 1), _mm512_set1_epi8(1));
          q = _mm512_or_si512(q, _mm512_slli_epi16(bit, 4));
        }
        scale = spread<16>(sc16, 2 * u);
      }
      for (int i = 0; i < N; ++i)
        acc[i] = _mm512_dpwssd_epi32(acc[i], _mm512_maddubs_epi16(q, load64(xq[i] + 64 * u)), scale);
    }
    for (int i = 0; i < N; ++i)
      a[i] = _mm256_add_epi32(_mm512_castsi512_si256(acc[i]), _mm512_extracti64x4_epi64(acc[i], 1));
  }
};

}  // namespace

void kquant_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y) {
  kquant_rows_with<Avx512>(w, r0, r1, x, y);
}

}  // namespace splitspec::kernels::avx512

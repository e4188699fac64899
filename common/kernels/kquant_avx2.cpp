// The K-quant integer products with AVX2 (maddubs, madd), in the x86
// skeleton (kquant_x86.h): the same integers as the reference, so the same
// bits. Built with -mavx2 -mfma -mf16c and called only after linear.cpp's
// check for them.
#include <cmath>

#include "common/kernels/kquant_x86.h"

namespace splitspec::kernels::avx2 {

namespace {

// One super-block, decoded a vector at a time: vector v holds weights
// 32v .. 32v + 31 as unsigned quants (Q6_K's plus 32, Q3_K's plus 4;
// IQ4_XS's as its signed grid values), and
// its scales as 16-bit lanes, each lane the scale of its weight pair.
template <WType T>
struct Block {
  // Sub-blocks of 16 weights, two a vector.
  static constexpr bool kSixteens = T == WType::Q6_K || T == WType::Q3_K || T == WType::Q2_K;
  const uint8_t* b;
  __m256i scales16;  // Q4_K/Q5_K/IQ4_XS: the eight scales, in both halves; the others: the sixteen

  Block(const uint8_t* block, const uint8_t* sc) : b(block) {
    if constexpr (T == WType::Q6_K) {
      scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    } else if constexpr (T == WType::Q3_K) {
      scales16 = _mm256_cvtepi8_epi16(q3k_scales(b + 96));
    } else if constexpr (T == WType::IQ4_XS) {
      scales16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(iq4xs_scales(b)));
    } else if constexpr (T == WType::Q2_K) {
      // The scale bytes' low nibbles.
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
      scales16 = _mm256_cvtepu8_epi16(_mm_and_si128(bytes, _mm_set1_epi8(0x0F)));
    } else {
      scales16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
    }
  }

  template <int V>
  __m256i quants() const {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    if constexpr (T == WType::IQ4_XS) {
      // Sub-block V: the low nibbles of quant bytes 16V .. 16V + 15, then
      // their high nibbles, as grid values (signed).
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8 + 16 * V));
      const __m256i both = _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);
      return _mm256_shuffle_epi8(iq4_grid(), _mm256_and_si256(both, low4));
    } else if constexpr (T == WType::Q2_K || T == WType::Q3_K) {
      // Vector 4h + j: bits 2j, 2j + 1 of the 32 quant bytes at 32h; for
      // Q3_K, bit 4h + j of the 32 high-bit bytes as bit 2.
      constexpr int h = V / 4, j = V % 4;
      constexpr bool three = T == WType::Q3_K;
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + (three ? 32 : 16) + 32 * h));
      __m256i q = _mm256_and_si256(_mm256_srli_epi16(bytes, 2 * j), _mm256_set1_epi8(3));
      if constexpr (three) {
        const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
        q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 4 * h + j), _mm256_set1_epi8(1)), 2));
      }
      return q;
    } else if constexpr (T == WType::Q6_K) {
      // Vector 4h + k: low nibbles (k < 2) or high nibbles of ql's 32 bytes at
      // 64h + 32(k & 1), with bits 2k, 2k + 1 of qh's 32 bytes at 32h on top.
      constexpr int h = V / 4, k = V % 4;
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h + 32 * (k & 1)));
      const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
      const __m256i nib = k < 2 ? _mm256_and_si256(lo, low4) : _mm256_and_si256(_mm256_srli_epi16(lo, 4), low4);
      return _mm256_or_si256(nib, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 2 * k), _mm256_set1_epi8(3)), 4));
    } else {
      // Vector 2j (low nibbles) and 2j + 1 (high) of qs's 32 bytes at 32j; for
      // Q5_K, bit V of qh's bytes on top.
      constexpr bool five = T == WType::Q5_K;
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + (five ? 48 : 16) + 32 * (V / 2)));
      __m256i q = V % 2 == 0 ? _mm256_and_si256(bytes, low4) : _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      if constexpr (five) {
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
        q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, V), _mm256_set1_epi8(1)), 4));
      }
      return q;
    }
  }

  template <int V>
  __m256i scales() const {
    if constexpr (kSixteens) {
      // Sub-blocks 2V (first 16 lanes) and 2V + 1: dword V of the sixteen.
      const __m256i pair = _mm256_permutevar8x32_epi32(scales16, _mm256_set1_epi32(V));
      return _mm256_shuffle_epi8(pair, _mm256_set_epi8(3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 1, 0, 1, 0, 1, 0, 1,
                                                       0, 1, 0, 1, 0, 1, 0, 1, 0));
    } else {
      return _mm256_shuffle_epi8(scales16, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * V)));
    }
  }
};

// 32 unsigned quants times 32 inputs, each pair of products summed (at most
// 63 * 127 * 2: no int16 saturation), then times the pairs' scales and summed
// in pairs again into 8 int32 lanes.
__m256i scaled(__m256i q, const int8_t* x, __m256i scales16) {
  const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  return _mm256_madd_epi16(p, scales16);
}

// The same for IQ4_XS's signed grid values: |q| times the inputs carrying
// q's sign (a pair at most 2 x 127 x 127).
__m256i scaled_signed(__m256i q, const int8_t* x, __m256i scales16) {
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(xv, q)), scales16);
}

template <WType T, int N, int V>
void add_vector(const Block<T>& blk, const int8_t* const* xq, __m256i* a) {
  const __m256i q = blk.template quants<V>(), s = blk.template scales<V>();
  for (int i = 0; i < N; ++i)
    a[i] = _mm256_add_epi32(a[i], T == WType::IQ4_XS ? scaled_signed(q, xq[i] + 32 * V, s) : scaled(q, xq[i] + 32 * V, s));
}

struct Avx2 {
  static constexpr bool kLowBits = true;
  template <WType T, int N>
  static void sums(const uint8_t* block, const uint8_t* sc, const int8_t* const* xq, __m256i* a) {
    const Block<T> blk(block, sc);
    for (int i = 0; i < N; ++i) a[i] = _mm256_setzero_si256();
    add_vector<T, N, 0>(blk, xq, a);
    add_vector<T, N, 1>(blk, xq, a);
    add_vector<T, N, 2>(blk, xq, a);
    add_vector<T, N, 3>(blk, xq, a);
    add_vector<T, N, 4>(blk, xq, a);
    add_vector<T, N, 5>(blk, xq, a);
    add_vector<T, N, 6>(blk, xq, a);
    add_vector<T, N, 7>(blk, xq, a);
  }
};

}  // namespace

void kquant_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y) {
  kquant_rows_with<Avx2>(w, r0, r1, x, y);
}

// quantize_q8k_superblock eight lanes at a time, with its operations in its
// order: the largest magnitude, its first holder's signed value, the same
// rounding and clamp. A block whose largest magnitude is 0 or not finite
// takes the scalar form, whose edge cases (all zero, infinities) it keeps;
// a NaN loses every comparison in both forms and quantizes to 127 in both.
void quantize_q8k_superblock(const float* v, int8_t* q, float& d, int16_t* sums) {
  const __m256 sign = _mm256_set1_ps(-0.0f), round = _mm256_set1_ps(12582912.0f), top = _mm256_set1_ps(127.0f);
  // A NaN lane of |v| leaves the running maximum as it was.
  __m256 amax8 = _mm256_setzero_ps();
  for (int i = 0; i < kSuperBlock; i += 8) amax8 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v + i)), amax8);
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float amax = _mm_cvtss_f32(m);
  if (!(amax > 0.0f) || !std::isfinite(amax)) return splitspec::quantize_q8k_superblock(v, q, d, sums);
  const __m256 target = _mm256_set1_ps(amax);
  int first = 0;
  for (int i = 0; i < kSuperBlock; i += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v + i)), target, _CMP_EQ_OQ));
    if (hit != 0) {
      first = i + __builtin_ctz(static_cast<unsigned>(hit));
      break;
    }
  }
  const float iscale = -127.0f / v[first];
  const __m256 vs = _mm256_set1_ps(iscale);
  __m128i four[4];
  for (int g4 = 0; g4 < 4; ++g4) {
    __m256i qi[8];
    for (int k = 0; k < 8; ++k) {
      const __m256 t = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(vs, _mm256_loadu_ps(v + 64 * g4 + 8 * k)), round), round);
      qi[k] = _mm256_cvttps_epi32(_mm256_min_ps(t, top));
    }
    // Packing narrows within 128-bit lanes; the permute restores the order.
    for (int h = 0; h < 2; ++h) {
      const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(qi[4 * h], qi[4 * h + 1]),
                                                _mm256_packs_epi32(qi[4 * h + 2], qi[4 * h + 3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 64 * g4 + 32 * h),
                          _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
    // Groups 4 g4 .. 4 g4 + 3 of sixteen: [lanes 0-3 of each | lanes 4-7 of each], then the halves added.
    __m256i s[4];
    for (int u = 0; u < 4; ++u) s[u] = _mm256_add_epi32(qi[2 * u], qi[2 * u + 1]);
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    four[g4] = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(sums), _mm_packs_epi32(four[0], four[1]));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(sums + 8), _mm_packs_epi32(four[2], four[3]));
  d = 1.0f / iscale;
}

}  // namespace splitspec::kernels::avx2

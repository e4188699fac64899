// Built with -mavx2 -mfma -ffp-contract=off; see kernels.h for why every
// output must come from one fixed instruction sequence.
#include "common/kernels/kernels_avx2.h"

#include <immintrin.h>
#include <sleef.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/kernels/avx2_reduce.h"
#include "common/kernels/kernels.h"

namespace splitspec::kernels::avx2 {

namespace {

// Eight cache elements as floats: an F16 cache's halves widen exactly, so
// both types run the same arithmetic on the values they hold.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// The first n < 8 elements, zeros after.
inline __m256 load_tail(const float* p, int64_t, __m256i mask) { return _mm256_maskload_ps(p, mask); }
inline __m256 load_tail(const uint16_t* p, int64_t n, __m256i) {
  uint16_t b[8] = {};
  std::memcpy(b, p, static_cast<size_t>(n) * sizeof(uint16_t));
  return load8(b);
}

// Four independent dot products at once: one alone is a chain of dependent
// multiply-adds, latency-bound. Each result still has its own fixed sequence.
template <class T>
inline void dot4(const float* q, const T* k0, const T* k1, const T* k2, const T* k3, int64_t len, float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t full = len & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
    a0 = _mm256_fmadd_ps(qv, load8(k0 + i), a0);
    a1 = _mm256_fmadd_ps(qv, load8(k1 + i), a1);
    a2 = _mm256_fmadd_ps(qv, load8(k2 + i), a2);
    a3 = _mm256_fmadd_ps(qv, load8(k3 + i), a3);
  }
  if (full < len) {
    const int64_t rest = len - full;
    const __m256i m = tail_mask(rest);
    const __m256 qv = _mm256_maskload_ps(q + full, m);
    a0 = _mm256_fmadd_ps(qv, load_tail(k0 + full, rest, m), a0);
    a1 = _mm256_fmadd_ps(qv, load_tail(k1 + full, rest, m), a1);
    a2 = _mm256_fmadd_ps(qv, load_tail(k2 + full, rest, m), a2);
    a3 = _mm256_fmadd_ps(qv, load_tail(k3 + full, rest, m), a3);
  }
  out[0] = hsum(a0);
  out[1] = hsum(a1);
  out[2] = hsum(a2);
  out[3] = hsum(a3);
}

// out[d] = sum_c p[c] * v[slot_c][d] * inv_total, accumulated over c in
// order. C = D / 8 known at compile time keeps the accumulators in registers;
// C = 0 handles any D (with a masked last vector), accumulating in memory.
template <int C, class T>
void weighted_sum(const float* p, const T* v, const std::vector<int32_t>& slots, int64_t D, float inv_total,
                  float* out) {
  constexpr int kMax = kMaxHeadDim / 8;
  __m256 o[C > 0 ? C : kMax];
  const int64_t chunks = C > 0 ? C : (D + 7) / 8, full = C > 0 ? C : D / 8;
  const int64_t rest = D - full * 8;
  const __m256i tm = tail_mask(rest);
  for (int64_t d = 0; d < chunks; ++d) o[d] = _mm256_setzero_ps();
  for (size_t c = 0; c < slots.size(); ++c) {
    const __m256 pc = _mm256_set1_ps(p[c]);
    const T* vs = v + static_cast<int64_t>(slots[c]) * D;
    for (int64_t d = 0; d < full; ++d) o[d] = _mm256_fmadd_ps(pc, load8(vs + 8 * d), o[d]);
    if (full < chunks) o[full] = _mm256_fmadd_ps(pc, load_tail(vs + 8 * full, rest, tm), o[full]);
  }
  const __m256 inv = _mm256_set1_ps(inv_total);
  for (int64_t d = 0; d < full; ++d) _mm256_storeu_ps(out + 8 * d, _mm256_mul_ps(o[d], inv));
  if (full < chunks) _mm256_maskstore_ps(out + 8 * full, tm, _mm256_mul_ps(o[full], inv));
}

// Turns the scores p[0, m) into exp(score - max) in place, zeros up to the
// next multiple of 8 (p must have room), and returns 1 / their sum.
// kernels_avx512.cpp's softmax_exps is this sequence 16 lanes wide: change
// both or neither.
float softmax_exps(float* p, int64_t m) {
  const int64_t padded = (m + 7) & ~int64_t{7};
  std::fill(p + m, p + padded, -std::numeric_limits<float>::infinity());  // exp -> exactly 0
  // The maximum eight lanes at a time (a scalar chain cost a tenth of a
  // row's attention). The maximum is the same in any order; only where a
  // score is NaN could it differ, and then every output is NaN either way.
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t c = 0; c < padded; c += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(p + c));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  const float mx = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
  // exp(score - max) eight lanes at a time; the sum's order depends only on m.
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t c = 0; c < padded; c += 8) {
    const __m256 e = Sleef_finz_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(p + c), vmx));
    _mm256_storeu_ps(p + c, e);
    acc = _mm256_add_ps(acc, e);
  }
  return 1.0f / hsum(acc);
}

template <class T>
void attention_row_of(const float* q, const T* k, const T* v, const std::vector<int32_t>& slots, int64_t D,
                      float scale, std::vector<float>& p, float* out) {
  const int64_t m = static_cast<int64_t>(slots.size());
  const int64_t padded = (m + 7) & ~int64_t{7};
  p.resize(padded);
  // Scores in groups of four slots; a partial last group repeats slot 0 into
  // the unused places, whose results are overwritten by the padding below.
  for (int64_t c = 0; c < m; c += 4) {
    const T* kp[4];
    for (int i = 0; i < 4; ++i) kp[i] = k + static_cast<int64_t>(slots[c + i < m ? c + i : 0]) * D;
    float s[4];
    dot4(q, kp[0], kp[1], kp[2], kp[3], D, s);
    for (int i = 0; i < 4 && c + i < m; ++i) p[c + i] = s[i] * scale;
  }
  const float inv_total = softmax_exps(p.data(), m);

  switch (D) {
    case 64: weighted_sum<8>(p.data(), v, slots, D, inv_total, out); break;
    case 128: weighted_sum<16>(p.data(), v, slots, D, inv_total, out); break;
    case 32: weighted_sum<4>(p.data(), v, slots, D, inv_total, out); break;
    default: weighted_sum<0>(p.data(), v, slots, D, inv_total, out); break;
  }
}

}  // namespace

void attention_row(const float* q, const float* k, const float* v, const std::vector<int32_t>& slots, int64_t D,
                   float scale, std::vector<float>& scratch, float* out) {
  attention_row_of(q, k, v, slots, D, scale, scratch, out);
}

void attention_row(const float* q, const uint16_t* k, const uint16_t* v, const std::vector<int32_t>& slots,
                   int64_t D, float scale, std::vector<float>& scratch, float* out) {
  attention_row_of(q, k, v, slots, D, scale, scratch, out);
}

void silu_mul(const float* gate, const float* up, int64_t count, float* y) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t i = 0; i < count; i += 8) {
    // The last partial vector goes through the same instructions, masked.
    const __m256i m = tail_mask(std::min<int64_t>(8, count - i));
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    const __m256 u = _mm256_maskload_ps(up + i, m);
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, Sleef_finz_expf8_u10avx2(_mm256_sub_ps(zero, g))));
    _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(s, u));
  }
}

float sum_exp(const float* x, int64_t n, float max) {
  const __m256 vmx = _mm256_set1_ps(max);
  __m256 acc = _mm256_setzero_ps();
  const int64_t full = n & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8)
    acc = _mm256_add_ps(acc, Sleef_finz_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx)));
  float s = hsum(acc);
  for (int64_t i = full; i < n; ++i) s += std::exp(x[i] - max);
  return s;
}

void half_to_float(const uint16_t* src, int64_t count, float* dst) {
  const int64_t full = count & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (int64_t i = full; i < count; ++i) dst[i] = _cvtsh_ss(src[i]);
}

void float_to_half(const float* src, int64_t count, uint16_t* dst) {
  constexpr int kNearestEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const int64_t full = count & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kNearestEven));
  for (int64_t i = full; i < count; ++i) dst[i] = _cvtss_sh(src[i], kNearestEven);
}

}  // namespace splitspec::kernels::avx2

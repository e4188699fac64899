// Built with -mavx2 -mfma -ffp-contract=off; see kernels.h for why every
// output must come from one fixed instruction sequence.
#include "common/engine/kernels_avx2.h"

#include <immintrin.h>
#include <sleef.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/engine/avx2_reduce.h"
#include "common/engine/kernels.h"

namespace splitspec::kernels::avx2 {

namespace {

// Four independent dot products at once: one alone is a chain of dependent
// multiply-adds, latency-bound. Each result still has its own fixed sequence.
inline void dot4(const float* q, const float* k0, const float* k1, const float* k2, const float* k3, int64_t len,
                 float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t full = len & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
    a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + i), a0);
    a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + i), a1);
    a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + i), a2);
    a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + i), a3);
  }
  if (full < len) {
    const __m256i m = tail_mask(len - full);
    const __m256 qv = _mm256_maskload_ps(q + full, m);
    a0 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k0 + full, m), a0);
    a1 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k1 + full, m), a1);
    a2 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k2 + full, m), a2);
    a3 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k3 + full, m), a3);
  }
  out[0] = hsum(a0);
  out[1] = hsum(a1);
  out[2] = hsum(a2);
  out[3] = hsum(a3);
}

// out[d] = sum_c p[c] * v[slot_c][d] * inv_total, accumulated over c in
// order. C = D / 8 known at compile time keeps the accumulators in registers;
// C = 0 handles any D (with a masked last vector), accumulating in memory.
template <int C>
void weighted_sum(const float* p, const float* v, const std::vector<int32_t>& slots, int64_t D, float inv_total,
                  float* out) {
  constexpr int kMax = kMaxHeadDim / 8;
  __m256 o[C > 0 ? C : kMax];
  const int64_t chunks = C > 0 ? C : (D + 7) / 8, full = C > 0 ? C : D / 8;
  const __m256i tm = tail_mask(D - full * 8);
  for (int64_t d = 0; d < chunks; ++d) o[d] = _mm256_setzero_ps();
  for (size_t c = 0; c < slots.size(); ++c) {
    const __m256 pc = _mm256_set1_ps(p[c]);
    const float* vs = v + static_cast<int64_t>(slots[c]) * D;
    for (int64_t d = 0; d < full; ++d) o[d] = _mm256_fmadd_ps(pc, _mm256_loadu_ps(vs + 8 * d), o[d]);
    if (full < chunks) o[full] = _mm256_fmadd_ps(pc, _mm256_maskload_ps(vs + 8 * full, tm), o[full]);
  }
  const __m256 inv = _mm256_set1_ps(inv_total);
  for (int64_t d = 0; d < full; ++d) _mm256_storeu_ps(out + 8 * d, _mm256_mul_ps(o[d], inv));
  if (full < chunks) _mm256_maskstore_ps(out + 8 * full, tm, _mm256_mul_ps(o[full], inv));
}

}  // namespace

void attention_row(const float* q, const float* k, const float* v, const std::vector<int32_t>& slots, int64_t D,
                   float scale, std::vector<float>& p, float* out) {
  const int64_t m = static_cast<int64_t>(slots.size());
  const int64_t padded = (m + 7) & ~int64_t{7};
  p.resize(padded);
  // Scores in groups of four slots; a partial last group repeats slot 0 into
  // the unused places, whose results are overwritten by the padding below.
  for (int64_t c = 0; c < m; c += 4) {
    const float* kp[4];
    for (int i = 0; i < 4; ++i) kp[i] = k + static_cast<int64_t>(slots[c + i < m ? c + i : 0]) * D;
    float s[4];
    dot4(q, kp[0], kp[1], kp[2], kp[3], D, s);
    for (int i = 0; i < 4 && c + i < m; ++i) p[c + i] = s[i] * scale;
  }
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < m; ++c) mx = std::max(mx, p[c]);
  std::fill(p.begin() + m, p.end(), -std::numeric_limits<float>::infinity());  // exp -> exactly 0
  // exp(score - max) eight lanes at a time; the sum's order depends only on m.
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t c = 0; c < padded; c += 8) {
    const __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(p.data() + c), vmx));
    _mm256_storeu_ps(p.data() + c, e);
    acc = _mm256_add_ps(acc, e);
  }
  const float inv_total = 1.0f / hsum(acc);

  switch (D) {
    case 64: weighted_sum<8>(p.data(), v, slots, D, inv_total, out); break;
    case 128: weighted_sum<16>(p.data(), v, slots, D, inv_total, out); break;
    case 32: weighted_sum<4>(p.data(), v, slots, D, inv_total, out); break;
    default: weighted_sum<0>(p.data(), v, slots, D, inv_total, out); break;
  }
}

void silu_mul(const float* gate, const float* up, int64_t count, float* y) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t i = 0; i < count; i += 8) {
    // The last partial vector goes through the same instructions, masked.
    const __m256i m = tail_mask(std::min<int64_t>(8, count - i));
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    const __m256 u = _mm256_maskload_ps(up + i, m);
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, Sleef_expf8_u10avx2(_mm256_sub_ps(zero, g))));
    _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(s, u));
  }
}

float sum_exp(const float* x, int64_t n, float max) {
  const __m256 vmx = _mm256_set1_ps(max);
  __m256 acc = _mm256_setzero_ps();
  const int64_t full = n & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8)
    acc = _mm256_add_ps(acc, Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx)));
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

}  // namespace splitspec::kernels::avx2

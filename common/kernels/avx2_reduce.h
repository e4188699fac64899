#pragma once
// AVX2 helpers shared by the kernels built with -mavx2 (include only from
// those translation units). hsum's order, ((a0+a4)+(a2+a6))+((a1+a5)+(a3+a7)),
// is part of linear()'s defined sequence (linear.h): keep it. Internal
// linkage: translation units built with different target flags (avx2,
// avx512) must not share one out-of-line copy.
#include <immintrin.h>

#include <cstdint>

namespace splitspec::kernels::avx2 {

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lanes [0, rem) set, for masked loads of a row's tail.
static inline __m256i tail_mask(int64_t rem) {
  alignas(32) int32_t m[8];
  for (int i = 0; i < 8; ++i) m[i] = i < rem ? -1 : 0;
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(m));
}

}  // namespace splitspec::kernels::avx2

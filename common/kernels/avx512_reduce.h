#pragma once
// AVX-512 helpers shared by the translation units built with -mavx512f
// (include only from those). sum_lanes8 sums as avx2_reduce.h's hsum does,
// so the float bodies of linear() and attention give the avx2 paths' bits.
// Internal linkage, as avx2_reduce.h's.
#include <immintrin.h>

namespace splitspec::kernels::avx512_reduce {

// The 16 outputs of eight registers r[0..7], each holding two outputs' 8
// lanes (a low, b high), summed as hsum sums one: ((l0+l4)+(l2+l6)) +
// ((l1+l5)+(l3+l7)), the same additions of the same operands, but three
// register-wide steps serve all 16 outputs instead of a shuffle chain each.
// sums[4c + m] is register 2m + (c >= 2)'s output (c odd: b, else a).
static inline void sum_lanes8(const __m512 r[8], float sums[16]) {
  __m512 four[4], two[2];
  // lanes l + l+4: [r0 a, r0 b, r1 a, r1 b] from r0 and r1, and so on
  for (int i = 0; i < 4; ++i)
    four[i] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  // (l0+l4)+(l2+l6) and (l1+l5)+(l3+l7), two outputs a 128-bit lane
  for (int i = 0; i < 2; ++i)
    two[i] = _mm512_add_ps(_mm512_shuffle_ps(four[2 * i], four[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_ps(four[2 * i], four[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  _mm512_storeu_ps(sums, _mm512_add_ps(_mm512_shuffle_ps(two[0], two[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_ps(two[0], two[1], _MM_SHUFFLE(3, 1, 3, 1))));
}

}  // namespace splitspec::kernels::avx512_reduce

// The packed Q4_K and Q6_K integer products with VNNI's vpdpbusd (AVX-512
// VL's 256-bit form), in the packed x86 skeleton (kquant_packed_x86.h): one
// instruction multiplies each lane's four quant bytes by its four
// activation bytes and adds all four to the lane's 32 bits, where AVX2
// needs maddubs, an add and a madd. Built with the avx512 body's flags and
// called only after linear.cpp's check for them.
#include <immintrin.h>

// GCC 12's AVX-512 headers build their "undefined" vectors as `__Y = __Y`,
// which -Wall reports at every inlined conversion.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "common/kernels/kquant_packed_x86.h"

namespace splitspec::kernels::avx512 {

namespace {

// A part is a lane's exact 32-bit sum. Half a Q4_K sub-block's (at most 16
// x 15 x 127 = 30480) fits the lane's low 16 bits, sign-extended, so one
// vpdpwssd against the scale in the low half (0 in the high) multiplies and
// adds it: a Q4_K sub-block takes two, one micro-op each, where one vpmulld
// (two on the ports vpdpbusd uses) and an add took three. A Q6_K
// sub-block's (16 x 63 x 127) needs the full 32 bits, so vpmulld.
struct Dpbusd {
  static constexpr int q4k_run = 4, q6k_run = 4;
  static __m256i step(__m256i part, __m256i q, __m256i x) { return _mm256_dpbusd_epi32(part, q, x); }
  static __m256i q4k_apply(__m256i isum, __m256i part, __m256i s) { return _mm256_dpwssd_epi32(isum, part, s); }
  static __m256i q6k_apply(__m256i isum, __m256i part, __m256i s) { return _mm256_add_epi32(isum, _mm256_mullo_epi32(part, s)); }
  static __m256i q4k_scale(__m256i u, int b) { return _mm256_and_si256(_mm256_srli_epi32(u, 8 * b), _mm256_set1_epi32(0xff)); }
  static __m256i q6k_scale(const uint8_t* p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
};

}  // namespace

void kquant_packed_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y) {
  kquant_packed_rows_with<Dpbusd>(w, r0, r1, x, y);
}

}  // namespace splitspec::kernels::avx512

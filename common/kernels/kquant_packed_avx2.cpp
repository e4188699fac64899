// The packed Q4_K and Q6_K integer products with AVX2, in the packed x86
// skeleton (kquant_packed_x86.h). Built with -mavx2 -mfma -mf16c and called
// only after linear.cpp's check.
#include "common/kernels/kquant_packed_x86.h"

namespace splitspec::kernels::avx2 {

namespace {

// maddubs sums each lane's products in pairs, into its two 16-bit halves;
// madd then multiplies both by the scale and adds them. The 16 bits hold a
// Q4_K sub-block's eight steps (at most 8 x 2 x 15 x 127 = 30480) and two
// of Q6_K's (2 x 2 x 63 x 127 = 32004).
struct Maddubs : Lanes8 {
  static constexpr int q4k_run = 8, q6k_run = 2;
  static __m256i step(__m256i part, __m256i q, const int8_t* x) { return _mm256_add_epi16(part, _mm256_maddubs_epi16(q, four(x))); }
  static __m256i q4k_apply(__m256i isum, __m256i part, __m256i s) { return _mm256_add_epi32(isum, _mm256_madd_epi16(part, s)); }
  static __m256i q6k_apply(__m256i isum, __m256i part, __m256i s) { return q4k_apply(isum, part, s); }
  // Byte b of each lane in both of its 16-bit halves.
  static __m256i q4k_scale(__m256i u, int b) {
    const char i = static_cast<char>(b), z = static_cast<char>(0x80);
    return shuffle(u, _mm_setr_epi8(i, z, i, z, i + 4, z, i + 4, z, i + 8, z, i + 8, z, i + 12, z, i + 12, z));
  }
  static __m256i q6k_scale(const uint8_t* p) {
    const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), dup));
  }
};

}  // namespace

void kquant_packed_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y) {
  kquant_packed_rows_with<Maddubs>(w, r0, r1, x, y);
}

}  // namespace splitspec::kernels::avx2

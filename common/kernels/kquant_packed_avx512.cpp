// The packed Q4_K and Q6_K integer products with VNNI's vpdpbusd, in the
// packed x86 skeleton (kquant_packed_x86.h): one instruction multiplies
// each lane's four quant bytes by its four activation bytes and adds all
// four to the lane's 32 bits, where AVX2 needs maddubs, an add and a madd.
// A whole group of sixteen rows in 512-bit vectors. Built with the avx512
// body's flags and called only after linear.cpp's check for them.
#include <immintrin.h>

// GCC 12's AVX-512 headers build their "undefined" vectors as `__Y = __Y`,
// which -Wall reports at every inlined conversion.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "common/kernels/kquant_packed_x86.h"

namespace splitspec::kernels::avx512 {

namespace {

// A group's sixteen rows, rows 0-7 in the low half: each product
// instruction does twice the work of a 256-bit one, and on Zen 5 retires
// at 0.7x its rate (bench/results/k_token.md, "Two groups a vector").
struct Lanes16 {
  using I = __m512i;
  using F = __m512;
  static constexpr int kRows = 16;
  static I load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static F halves(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static I shuffle(I v, __m128i order) { return _mm512_shuffle_epi8(v, _mm512_broadcast_i32x4(order)); }
  static I zero() { return _mm512_setzero_si512(); }
  static I set8(char c) { return _mm512_set1_epi8(c); }
  static I set32(int32_t v) { return _mm512_set1_epi32(v); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub32(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I madd16(I a, I b) { return _mm512_madd_epi16(a, b); }
  static I srli16(I v, int n) { return _mm512_srli_epi16(v, n); }
  static I slli16(I v, int n) { return _mm512_slli_epi16(v, n); }
  static I srli32(I v, int n) { return _mm512_srli_epi32(v, n); }
  static I slli32(I v, int n) { return _mm512_slli_epi32(v, n); }
  static F fzero() { return _mm512_setzero_ps(); }
  static F fset(float v) { return _mm512_set1_ps(v); }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F neg(F v) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN))); }
  static void store(float* out, F v) { _mm512_storeu_ps(out, v); }
};

// vpdpbusd with the four signed bytes at x broadcast to every lane from
// memory ({1to16}), written as one instruction: GCC 12 emits
// `_mm512_dpbusd_epi32(a, q, _mm512_set1_epi32(x))` as a vpbroadcastd and
// then the product, one broadcast for every product here. Folded, the
// 1B-class Q4_K_M 5-token forward took 0.9x the time on Zen 5; Q4_0's
// products, tried the same way, were no faster (bench/results/k_token.md,
// "Embedded broadcasts"). The integers are vpdpbusd's either way.
inline __m512i dpbusd_at(__m512i acc, __m512i q, const int8_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(q), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
}

// The 32 bits at p in every lane as a load alone: GCC turns
// _mm512_set1_epi32 of an array element into a vpermd of the array held in
// a register, an instruction on the ports the products use.
inline __m512i broadcast_at(const int32_t* p) {
  __m512i v;
  asm("vpbroadcastd %1, %0" : "=v"(v) : "m"(*p));
  return v;
}

// A part is a lane's exact 32-bit sum. Half a Q4_K sub-block's (at most 16
// x 15 x 127 = 30480) fits the lane's low 16 bits, sign-extended, so one
// vpdpwssd against the scale in the low half (0 in the high) multiplies and
// adds it: a Q4_K sub-block takes two, one micro-op each, where one vpmulld
// (two on the ports vpdpbusd uses) and an add took three. A Q6_K
// sub-block's (16 x 63 x 127) needs the full 32 bits, so vpmulld.
struct Dpbusd : Lanes16 {
  static constexpr int q4k_run = 4, q6k_run = 4;
  static I step(I part, I q, const int8_t* x) { return dpbusd_at(part, q, x); }
  static I broadcast(const int32_t* p) { return broadcast_at(p); }
  static I q4k_apply(I isum, I part, I s) { return _mm512_dpwssd_epi32(isum, part, s); }
  static I q6k_apply(I isum, I part, I s) { return _mm512_add_epi32(isum, _mm512_mullo_epi32(part, s)); }
  static I q4k_scale(I u, int b) { return and_(srli32(u, 8 * b), set32(0xff)); }
  static I q6k_scale(const uint8_t* p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};

}  // namespace

void kquant_packed_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y) {
  kquant_packed_rows_with<Dpbusd>(w, r0, r1, x, y);
}

}  // namespace splitspec::kernels::avx512

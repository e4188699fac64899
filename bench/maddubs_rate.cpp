// How many AVX2 byte products (vpmaddubsw) and word products (vpmaddwd) this
// CPU retires a nanosecond, mixed as the packed K-quant bodies mix them, and
// on a VNNI machine how many multiply-adds vpdpbusd does a nanosecond in
// 256- and 512-bit vectors: the floor under what each extra activation row
// of a k-token forward costs (docs/model-families.md, "k-token forwards");
// and which instructions share vpdpbusd's ports, and how many loads go beside them.
// Independent chains hide the latency; the empty asm keeps every chain's
// result live.
//   g++ -O2 -march=native bench/maddubs_rate.cpp -o build/maddubs_rate && build/maddubs_rate
#include <immintrin.h>

#include <chrono>
#include <cstdio>

namespace {

template <class V = __m256i, int kChains = 12, class Step>
double per_ns(Step step, int ops_per_iter) {
  V a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = V{} + static_cast<char>(i + 1);
  const V b = V{} + static_cast<char>(3);
  const long iters = 20'000'000;
  const auto t0 = std::chrono::steady_clock::now();
  for (long n = 0; n < iters; ++n) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) a[i] = step(a[i], b);
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) asm volatile("" : "+v"(a[i]));
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(iters) * kChains * ops_per_iter / ns;
}

#if defined(__AVX512VNNI__)
// Which instructions share vpdpbusd's ports: twelve independent 512-bit
// vpdpbusd an iteration, alone and with four more of another kind beside
// them (independent too), in core cycles (the clock from a chain of
// scalar adds). Where the four cost nothing, they run on other ports;
// where they add about two cycles, they take the products' two.
#define SPLITSPEC_DP12                                                                                          \
  "vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm1\n vpdpbusd %%zmm30, %%zmm31, %%zmm2\n"    \
  "vpdpbusd %%zmm30, %%zmm31, %%zmm3\n vpdpbusd %%zmm30, %%zmm31, %%zmm4\n vpdpbusd %%zmm30, %%zmm31, %%zmm5\n"    \
  "vpdpbusd %%zmm30, %%zmm31, %%zmm6\n vpdpbusd %%zmm30, %%zmm31, %%zmm7\n vpdpbusd %%zmm30, %%zmm31, %%zmm8\n"    \
  "vpdpbusd %%zmm30, %%zmm31, %%zmm9\n vpdpbusd %%zmm30, %%zmm31, %%zmm10\n vpdpbusd %%zmm30, %%zmm31, %%zmm11\n"
#define SPLITSPEC_MIX(name, four)                                                                                 \
  {                                                                                                             \
    const auto t0 = std::chrono::steady_clock::now();                                                           \
    for (long n = 0; n < iters; ++n)                                                                            \
      asm volatile(SPLITSPEC_DP12 four::"r"(buf)                                                                \
                   : "memory", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", \
                     "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15");                                     \
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();  \
    std::printf("  %-34s %.2f\n", name, ns / iters * ghz);                                                      \
  }

void ports() {
  alignas(64) static char buf[256];
  const long iters = 20'000'000;
  const auto t0 = std::chrono::steady_clock::now();
  long x = 0;
  for (long n = 0; n < iters; ++n) asm volatile("add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0" : "+r"(x));
  const double ghz = 4.0 * iters / std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  std::printf("cycles an iteration at %.2f GHz: 12 vpdpbusd (512-bit)\n", ghz);
  SPLITSPEC_MIX("alone", "")
  SPLITSPEC_MIX("+ 4 vpmulld", "vpmulld %%zmm30, %%zmm31, %%zmm12\n vpmulld %%zmm30, %%zmm31, %%zmm13\n"
                               "vpmulld %%zmm30, %%zmm31, %%zmm14\n vpmulld %%zmm30, %%zmm31, %%zmm15\n")
  SPLITSPEC_MIX("+ 4 vpdpwssd", "vpdpwssd %%zmm30, %%zmm31, %%zmm12\n vpdpwssd %%zmm30, %%zmm31, %%zmm13\n"
                                "vpdpwssd %%zmm30, %%zmm31, %%zmm14\n vpdpwssd %%zmm30, %%zmm31, %%zmm15\n")
  SPLITSPEC_MIX("+ 4 vinserti64x4 (memory)", "vinserti64x4 $1, (%0), %%zmm12, %%zmm12\n vinserti64x4 $1, 64(%0), %%zmm13, %%zmm13\n"
                                             "vinserti64x4 $1, 128(%0), %%zmm14, %%zmm14\n vinserti64x4 $1, 192(%0), %%zmm15, %%zmm15\n")
  SPLITSPEC_MIX("+ 4 vpshufb", "vpshufb %%zmm30, %%zmm31, %%zmm12\n vpshufb %%zmm30, %%zmm31, %%zmm13\n"
                               "vpshufb %%zmm30, %%zmm31, %%zmm14\n vpshufb %%zmm30, %%zmm31, %%zmm15\n")
  SPLITSPEC_MIX("+ 4 vpternlogd", "vpternlogd $0xf8, %%zmm30, %%zmm31, %%zmm12\n vpternlogd $0xf8, %%zmm30, %%zmm31, %%zmm13\n"
                                  "vpternlogd $0xf8, %%zmm30, %%zmm31, %%zmm14\n vpternlogd $0xf8, %%zmm30, %%zmm31, %%zmm15\n")
  SPLITSPEC_MIX("+ 4 vpsrlw", "vpsrlw $4, %%zmm30, %%zmm12\n vpsrlw $4, %%zmm30, %%zmm13\n"
                              "vpsrlw $4, %%zmm31, %%zmm14\n vpsrlw $4, %%zmm31, %%zmm15\n")
  SPLITSPEC_MIX("+ 4 vpbroadcastd (memory)", "vpbroadcastd (%0), %%zmm12\n vpbroadcastd 4(%0), %%zmm13\n"
                                             "vpbroadcastd 8(%0), %%zmm14\n vpbroadcastd 12(%0), %%zmm15\n")
  // A broadcast for every product, as a 32-weight block's body takes them:
  // this core loads two 512-bit vectors a cycle, broadcasts included.
#define SPLITSPEC_BROADCAST12 \
  "vpbroadcastd (%0), %%zmm12\n vpbroadcastd 4(%0), %%zmm13\n vpbroadcastd 8(%0), %%zmm14\n" \
  "vpbroadcastd 12(%0), %%zmm15\n vpbroadcastd 16(%0), %%zmm12\n vpbroadcastd 20(%0), %%zmm13\n" \
  "vpbroadcastd 24(%0), %%zmm14\n vpbroadcastd 28(%0), %%zmm15\n vpbroadcastd 32(%0), %%zmm12\n" \
  "vpbroadcastd 36(%0), %%zmm13\n vpbroadcastd 40(%0), %%zmm14\n vpbroadcastd 44(%0), %%zmm15\n"
  SPLITSPEC_MIX("+ 12 vpbroadcastd (memory)", SPLITSPEC_BROADCAST12)
  SPLITSPEC_MIX("+ 12 vpbroadcastd, 4 vmovdqu64",
                SPLITSPEC_BROADCAST12
                "vmovdqu64 64(%0), %%zmm12\n vmovdqu64 128(%0), %%zmm13\n vmovdqu64 192(%0), %%zmm14\n vmovdqu64 (%0), %%zmm15\n")
  SPLITSPEC_MIX("+ 12 vpbroadcastd, 3 vfmadd231ps",
                SPLITSPEC_BROADCAST12
                "vfmadd231ps %%zmm30, %%zmm31, %%zmm12\n vfmadd231ps %%zmm30, %%zmm31, %%zmm13\n"
                "vfmadd231ps %%zmm30, %%zmm31, %%zmm14\n")
  // A 32-weight block's float step, once an input row (Q8_0, Q4_0).
  SPLITSPEC_MIX("+ 4 vfmadd231ps", "vfmadd231ps %%zmm30, %%zmm31, %%zmm12\n vfmadd231ps %%zmm30, %%zmm31, %%zmm13\n"
                                   "vfmadd231ps %%zmm30, %%zmm31, %%zmm14\n vfmadd231ps %%zmm30, %%zmm31, %%zmm15\n")
  SPLITSPEC_MIX("+ 4 vmulps", "vmulps %%zmm30, %%zmm31, %%zmm12\n vmulps %%zmm30, %%zmm31, %%zmm13\n"
                              "vmulps %%zmm30, %%zmm31, %%zmm14\n vmulps %%zmm30, %%zmm31, %%zmm15\n")
  SPLITSPEC_MIX("+ 4 vcvtdq2ps", "vcvtdq2ps %%zmm30, %%zmm12\n vcvtdq2ps %%zmm30, %%zmm13\n"
                                 "vcvtdq2ps %%zmm31, %%zmm14\n vcvtdq2ps %%zmm31, %%zmm15\n")
  SPLITSPEC_MIX("+ 4 vpaddd", "vpaddd %%zmm30, %%zmm31, %%zmm12\n vpaddd %%zmm30, %%zmm31, %%zmm13\n"
                              "vpaddd %%zmm30, %%zmm31, %%zmm14\n vpaddd %%zmm30, %%zmm31, %%zmm15\n")
  SPLITSPEC_MIX("+ 4 vpbroadcastd (register)", "vpbroadcastd %k0, %%zmm12\n vpbroadcastd %k0, %%zmm13\n"
                                               "vpbroadcastd %k0, %%zmm14\n vpbroadcastd %k0, %%zmm15\n")
}
#endif

}  // namespace

int main() {
  for (int rep = 0; rep < 3; ++rep) {
    // Q4_K's packed body: eight byte products of one decoded vector summed
    // in 16 bits, then one word product by the sub-block's scale.
    const double q4k = per_ns(
        [](__m256i a, __m256i b) {
          __m256i s = _mm256_maddubs_epi16(a, b);
#pragma GCC unroll 8
          for (int k = 1; k < 8; ++k)
            s = _mm256_add_epi16(s, _mm256_maddubs_epi16(a, _mm256_add_epi8(b, _mm256_set1_epi8(static_cast<char>(k)))));
          return _mm256_madd_epi16(s, b);
        },
        9);
    // Q6_K's: two byte products summed in 16 bits, one word product.
    const double q6k = per_ns(
        [](__m256i a, __m256i b) {
          const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(a, b), _mm256_maddubs_epi16(a, _mm256_add_epi8(b, b)));
          return _mm256_add_epi32(a, _mm256_madd_epi16(s, b));
        },
        3);
    std::printf("products (vpmaddubsw + vpmaddwd) per ns: Q4_K's mix %.2f, Q6_K's mix %.2f\n", q4k, q6k);
#if defined(__AVX512VNNI__)
    // 24 chains: fewer left this Zen 5's vpdpbusd waiting on its latency.
    using Z = __m512i;
    const double y = per_ns<__m256i, 24>([](__m256i a, __m256i b) { return _mm256_dpbusd_epi32(a, b, b); }, 32);
    const double z = per_ns<Z, 24>([](Z a, Z b) { return _mm512_dpbusd_epi32(a, b, b); }, 64);
    std::printf("vpdpbusd multiply-adds per ns: 256-bit %.0f, 512-bit %.0f\n", y, z);
#endif
  }
#if defined(__AVX512VNNI__)
  ports();
#endif
}

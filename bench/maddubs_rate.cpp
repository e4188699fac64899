// How many AVX2 byte products (vpmaddubsw) and word products (vpmaddwd) this
// CPU retires a nanosecond, mixed as the packed K-quant bodies mix them, and
// on a VNNI machine how many multiply-adds vpdpbusd does a nanosecond in
// 256- and 512-bit vectors: the floor under what each extra activation row
// of a k-token forward costs (docs/model-families.md, "k-token forwards").
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
}

#pragma once
// vpdpbusd with its signed bytes broadcast from memory, for the AVX-512
// bodies (include only from translation units built with AVX-512 VNNI).
// Written as one instruction because GCC 12 emits `_mm512_dpbusd_epi32(a,
// q, _mm512_set1_epi32(x))` as a separate vpbroadcastd and then the
// product. Folded ({1to16}), the packed K-quant products, which take one
// broadcast per product, made the 1B-class Q4_K_M 5-token forward 0.9x
// its time on Zen 5 (bench/results/k_token.md, "Embedded broadcasts");
// Q4_0's products, tried the same way, were no faster. The integers are
// vpdpbusd's either way.
#include <immintrin.h>

#include <cstdint>

namespace splitspec::kernels::vnni {

// acc plus each lane's four unsigned bytes of q times the four signed bytes
// at x.
static inline __m512i dpbusd_at(__m512i acc, __m512i q, const void* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(q), "m"(*static_cast<const int32_t*>(x)));
  return acc;
}

static inline __m256i dpbusd_at(__m256i acc, __m256i q, const void* x) {
  asm("vpdpbusd %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(q), "m"(*static_cast<const int32_t*>(x)));
  return acc;
}

}  // namespace splitspec::kernels::vnni

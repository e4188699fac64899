// linear() for packed Q8_0/Q4_0 weights with AVX-512 VNNI: a register holds
// one 4-byte piece of 16 rows (weight_type.h's packing), vpdpbusd adds its
// products with the input's matching 4 bytes into each row's lane, and
// eight pieces make each row's exact block sum (linear.h), with no
// horizontal step. Built with -mavx512f -mavx512bw -mavx512dq -mavx512vl
// -mavx512vnni (plus the avx2 flags) and -ffp-contract=off. vpdpbusd
// multiplies unsigned by signed bytes, so the weights go in unsigned (Q8_0
// + 128, Q4_0's nibbles as they are) and each sum starts from -offset times
// the input block's sum.
#include <immintrin.h>

// GCC 12's AVX-512 headers build their "undefined" vectors as `__Y = __Y`,
// which -Wall reports at every inlined conversion.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstring>

#include "common/engine/linear_isa.h"

namespace splitspec::kernels::avx512 {

namespace {

template <WType T>
constexpr int32_t kOffset = T == WType::Q8_0 ? 128 : 8;

// The block's eight 4-byte weight pieces of 16 rows, unsigned.
template <WType T>
inline void weights(const uint8_t* quants, __m512i w[8]) {
  if (T == WType::Q8_0) {
    const __m512i flip = _mm512_set1_epi8(-128);
    for (int k = 0; k < 8; ++k) w[k] = _mm512_xor_si512(_mm512_loadu_si512(quants + 64 * k), flip);
    return;
  }
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  for (int k = 0; k < 4; ++k) {
    const __m512i p = _mm512_loadu_si512(quants + 64 * k);
    w[k] = _mm512_and_si512(p, low4);
    w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(p, 4), low4);
  }
}

// Output rows [r, r + 16) (one packed group) for N input rows.
template <WType T, int N>
void group(const LinearCall& c, int64_t r, int64_t j) {
  const QuantizedRows& qx = *c.qx;
  const int64_t nb = qx.blocks;
  constexpr int64_t bb = block_bytes(T);
  const uint8_t* g = static_cast<const uint8_t*>(c.w.data) + r * row_bytes(T, c.w.cols);
  __m512 acc[N];
  for (int jj = 0; jj < N; ++jj) acc[jj] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kPackRows * bb;
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    __m512i w[8];
    weights<T>(blk + 2 * kPackRows, w);
    for (int jj = 0; jj < N; ++jj) {
      const int64_t row = (j + jj) * nb + b;
      const auto* x = reinterpret_cast<const int32_t*>(qx.q.data() + row * kQBlock);
      // Two chains of four, added at the end: exact, and half the latency.
      __m512i s0 = _mm512_set1_epi32(-kOffset<T> * qx.sum[row]), s1 = _mm512_setzero_si512();
      for (int k = 0; k < 8; k += 2) {
        s0 = _mm512_dpbusd_epi32(s0, w[k], _mm512_set1_epi32(x[k]));
        s1 = _mm512_dpbusd_epi32(s1, w[k + 1], _mm512_set1_epi32(x[k + 1]));
      }
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(qx.d[row]));
      acc[jj] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), d, acc[jj]);
    }
  }
  for (int jj = 0; jj < N; ++jj) _mm512_storeu_ps(c.y + (j + jj) * c.w.rows + r, acc[jj]);
}

template <WType T>
void quant_linear(const LinearCall& c, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r += kPackRows) {
    int64_t j = 0;
    for (; j + 4 <= c.n; j += 4) group<T, 4>(c, r, j);
    switch (c.n - j) {
      case 3: group<T, 3>(c, r, j); break;
      case 2: group<T, 2>(c, r, j); break;
      case 1: group<T, 1>(c, r, j); break;
      default: break;
    }
  }
}

}  // namespace

void linear_rows(const LinearCall& c, int64_t r0, int64_t r1) {
  if (c.w.type == WType::Q8_0)
    quant_linear<WType::Q8_0>(c, r0, r1);
  else
    quant_linear<WType::Q4_0>(c, r0, r1);
}

}  // namespace splitspec::kernels::avx512

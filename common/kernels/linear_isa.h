#pragma once
// The instruction-set bodies of linear() (linear.h), one file each, built
// with their own target flags and called only when the CPU has them. Each
// computes output columns [r0, r1) of one call, exactly as linear_reference;
// for quantized weights, of a packed matrix, [r0, r1) in whole groups of 16
// below its plain tail.
#include <cstdint>

#include "common/kernels/kquant.h"
#include "common/kernels/linear.h"
#include "common/kernels/quant.h"
#include "common/kernels/weight_type.h"

namespace splitspec::kernels {

struct LinearCall {
  const float* x;           // [n, w.cols]
  int64_t n;
  MatrixRef w;
  float* y;                 // [n, w.rows]
  const QuantizedRows* qx;  // x quantized, for 32-weight block weights
};

// Requests the `bytes` past `block` (one packed block of a quantized body)
// ahead of their use: the hardware prefetcher alone left memory idle while a
// k-row block computed, so k rows cost the 1-row time plus their compute
// instead of the larger of the two. The AVX-512 K-quant bodies ask 16 KB
// ahead into L2 (prefetcht1; the 32-weight body asks its own distance,
// linear_avx512.cpp): into L1 (prefetcht0, 8 KB ahead, as first written) each
// request holds one of L1's few fill buffers for a whole memory latency, and
// on a Sapphire Rapids VM that made the 1B-class Q4_K_M 1-token forward 1.26x
// the time of this form (bench/results/k_token.md, "Prefetch into L2"). The
// other bodies keep the L1 form, measured on the Zen 5 VMs (no AVX-512
// exposed) that run the AVX2 ones. An address, not a pointer: it may lie
// past the matrix. Internal linkage: each body's copy is built with that
// body's flags.
static inline void prefetch_ahead(const uint8_t* block, int64_t bytes) {
#if defined(__AVX512F__)
  constexpr uintptr_t kAhead = 16384;
  constexpr int kLocality = 2;
#else
  constexpr uintptr_t kAhead = 8192;
  constexpr int kLocality = 3;
#endif
  for (int64_t l = 0; l < bytes; l += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(block) + kAhead + l), 0, kLocality);
}

void reference_rows(const LinearCall& c, int64_t r0, int64_t r1);
namespace avx2 {
void linear_rows(const LinearCall& c, int64_t r0, int64_t r1);
// quantize_activations, vectorised.
void quantize_activations(const float* x, int64_t rows, int64_t cols, QuantizedRows& out);
// quantize_q8k_superblock, vectorised, bit for bit (also for the avx512 body).
void quantize_q8k_superblock(const float* v, int8_t* q, float& d, int16_t* sums);
// Rows [r0, r1) of K-quant `w` times every row of `x`, into y[j][r]: each
// output kquant.h's kquant_dots, bit for bit; eight weight rows at a time,
// one per lane (kquant_x86.h).
void kquant_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y);
// The same for rows [r0, r1) of a packed Q4_K or Q6_K matrix, in whole groups
// of kKPackRows (kquant_packed_x86.h), eight rows a pass.
void kquant_packed_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y);
}
namespace avx512 {
// Packed 32-weight block weights in whole groups of 16 rows (the rest runs the avx2
// body), and float weights of any range.
void linear_rows(const LinearCall& c, int64_t r0, int64_t r1);
// avx2::kquant_rows with AVX-512 maddubs and VNNI's vpdpwssd for the integer
// products (Q2_K and Q3_K: the avx2 body's).
void kquant_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y);
// avx2::kquant_packed_rows with VNNI's vpdpbusd, a whole group a pass.
void kquant_packed_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y);
// quantize_activations, sixteen blocks a pass, bit for bit.
void quantize_activations(const float* x, int64_t rows, int64_t cols, QuantizedRows& out);
}
namespace neon {
void linear_rows(const LinearCall& c, int64_t r0, int64_t r1);
void quantize_activations(const float* x, int64_t rows, int64_t cols, QuantizedRows& out);
void superblock_sums(WType t, const uint8_t* block, int n, const int8_t* const* xq, const int16_t* const* bsums,
                     int32_t* out);
}

}  // namespace splitspec::kernels

#pragma once
// y[n, w.rows] = x[n, w.cols] . w^T for weights of any WType: the kernel
// every forward spends its time in. Free of LibTorch.
//
// Batch-invariant: row j of the result is bitwise the same whatever n is,
// whichever rows come with it, and whatever the thread count, so verifying
// k drafted tokens in one forward gives exactly the logits k one-token steps
// would. Each (output, input row) pair follows one fixed definition,
// linear_reference(), and every instruction set computes exactly that
// definition, bit for bit:
//   F32/F16/BF16: 8 lanes; lane l accumulates w[i] * x[i] for i = l mod 8
//     in increasing i with fused multiply-adds (a short last group padded
//     with zeros), then the lanes are summed as ((l0+l4)+(l2+l6)) +
//     ((l1+l5)+(l3+l7)).
//   32-weight blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL): x is quantized
//     per row and block (quant.h); the output starts at 0 and, block by
//     block in order, adds the block's exact integer sum of weight (its
//     integer, quant.h's block_quants) times input, times d_w * d_x, with
//     one fused multiply-add; for Q4_1 and Q5_1 then m_w times the input
//     block's s (quant.h), with another. (Integer sums are exact in
//     any order, so the bodies vectorise across 16 output rows of a packed
//     matrix instead.)
//   Super-blocks (the K-quants, IQ4_XS): as kquant.h's kquant_dots.
// So a server on x86 and a robot on ARM compute the same matrix products
// (the forward's other kernels, attention among them, still differ between
// their vector and scalar paths; within one machine every result is fixed).
// Quantized matrices run fast when packed (weight_type.h); plain ones run
// the reference.
#include <cstdint>

#include "common/kernels/weight_type.h"

namespace splitspec::kernels {

enum class Isa { kScalar, kAvx2, kAvx512, kNeon };
constexpr int kIsas = 4;
// "scalar", "avx2" (AVX2, FMA, F16C), "avx512" (AVX-512 F/BW/DQ/VL with VNNI,
// on top of avx2), "neon" (AArch64 with the dot-product extension).
const char* isa_name(Isa isa);
bool isa_available(Isa isa);
// The best this CPU has, unless SPLITSPEC_KERNELS names a lower one.
Isa isa_in_use();
// Tests run every available path in one process. Throws splitspec::Error if
// this CPU lacks `isa`.
void use_isa(Isa isa);

void linear(const float* x, int64_t n, const MatrixRef& w, float* y);

// linear() of several matrices over one input x[n, cols], in one parallel
// region, x quantized once where their weights share an activation form:
// each y bitwise what linear() gives it alone (a layer's q, k and v, or its
// gate and up, without a region and a quantization each).
struct LinearTo {
  MatrixRef w;
  float* y;  // [n, w.rows]
};
void linear_many(const float* x, int64_t n, const LinearTo* outs, int count);

// The definition above in plain C++, one thread: the oracle of the tests.
void linear_reference(const float* x, int64_t n, const MatrixRef& w, float* y);

}  // namespace splitspec::kernels

#pragma once
// The instruction-set bodies of linear() (linear.h), one file each, built
// with their own target flags and called only when the CPU has them. Each
// computes output columns [r0, r1) of one call, exactly as linear_reference;
// for quantized weights, of a packed matrix, [r0, r1) in whole groups of 16
// below its plain tail.
#include <cstdint>

#include "common/engine/linear.h"
#include "common/engine/quant.h"
#include "common/engine/weight_type.h"

namespace splitspec::kernels {

struct LinearCall {
  const float* x;           // [n, w.cols]
  int64_t n;
  MatrixRef w;
  float* y;                 // [n, w.rows]
  const QuantizedRows* qx;  // x quantized, for Q8_0/Q4_0 weights
};

void reference_rows(const LinearCall& c, int64_t r0, int64_t r1);
namespace avx2 {
void linear_rows(const LinearCall& c, int64_t r0, int64_t r1);
// quantize_activations, vectorised (also for the avx512 body).
void quantize_activations(const float* x, int64_t rows, int64_t cols, QuantizedRows& out);
}
namespace avx512 {
// Packed Q8_0/Q4_0 weights in whole groups of 16 rows (the rest runs the avx2
// body), and float weights of any range.
void linear_rows(const LinearCall& c, int64_t r0, int64_t r1);
}
namespace neon {
void linear_rows(const LinearCall& c, int64_t r0, int64_t r1);
void quantize_activations(const float* x, int64_t rows, int64_t cols, QuantizedRows& out);
}

}  // namespace splitspec::kernels

#pragma once
// The instruction-set bodies of linear() (linear.h), one file each, built
// with their own target flags and called only when the CPU has them. Each
// computes output columns [r0, r1) of one call, exactly as linear_reference.
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
  const QuantizedRows* qx;  // x quantized, for Q8_0/Q4_0 weights, with
                            // start for weights stored unsigned (weight_offset)
};

// How far above its value each instruction set's body stores a weight of
// `type` as an unsigned byte: vpdpbusd multiplies unsigned by signed bytes
// (Q8_0 goes in + 128, Q4_0 as its nibbles, 8 above); maddubs likewise for
// Q4_0 (AVX2 multiplies Q8_0 by sign instead, and NEON's sdot is signed).
int32_t weight_offset(Isa isa, WType type);

void reference_rows(const LinearCall& c, int64_t r0, int64_t r1);
namespace avx2 {
void linear_rows(const LinearCall& c, int64_t r0, int64_t r1);
}
namespace avx512 {
// Q8_0/Q4_0 weights only (float weights run the avx2 body).
void linear_rows(const LinearCall& c, int64_t r0, int64_t r1);
}
namespace neon {
void linear_rows(const LinearCall& c, int64_t r0, int64_t r1);
}

}  // namespace splitspec::kernels

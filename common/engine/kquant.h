#pragma once
// llama.cpp's K-quants, read as its files store them: super-blocks of 256
// weights with 6- or 8-bit sub-block scales under a half-precision scale.
//   Q4_K (144 bytes): d, dmin (halves), 12 bytes of eight 6-bit scales and
//     mins, 128 bytes of 4-bit quants; w = d * sc * q - dmin * m per 32.
//   Q5_K (176 bytes): as Q4_K, with a fifth bit per weight (32 bytes).
//   Q6_K (210 bytes): 128 bytes of low 4 bits, 64 of high 2 bits, sixteen
//     int8 scales, d; w = d * sc * (q - 32) per 16.
// Their products take activations quantized as llama.cpp's Q8_K: per row and
// super-block, d = max / -127 (max the signed value of largest magnitude),
// q = round-to-even(x * -127 / max) capped at 127, and each 16 q's sum.
// Free of LibTorch; built with -ffp-contract=off.
#include <cstdint>
#include <vector>

#include "common/engine/weight_type.h"

namespace splitspec {

// One super-block as 256 floats, exactly as llama.cpp's dequantize_row_*.
void dequantize_superblock(WType t, const uint8_t* block, float* y);
// Whether the super-block's half-precision scales are finite.
bool superblock_scales_finite(WType t, const uint8_t* block);

struct Q8KRows {
  int64_t rows = 0, cols = 0, blocks = 0;
  std::vector<int8_t> q;       // [rows][cols]
  std::vector<float> d;        // [rows][blocks]
  std::vector<int16_t> bsums;  // [rows][blocks][16]
};
void quantize_q8k(const float* x, int64_t rows, int64_t cols, Q8KRows& out);

// One super-block's exact integer sum over its sub-blocks of scale x
// (quant x input), the quants as weights (Q6_K's minus 32); `bsums` are the
// inputs' 16-sums. Any order gives the same integer, so a vector body may
// compute it its own way.
using SuperblockSum = int32_t (*)(WType t, const uint8_t* block, const int8_t* xq, const int16_t* bsums);
int32_t superblock_sum(WType t, const uint8_t* block, const int8_t* xq, const int16_t* bsums);

// Row `row` (plain bytes of `cols` weights) times row j of `x`: super-block by
// super-block in order, `sum` (and, for Q4_K/Q5_K, the integer sum of min x
// the inputs' 16-sums), each added to the output with one fused
// multiply-add by d_w * d_x (and -dmin_w * d_x).
float kquant_dot(WType t, const uint8_t* row, int64_t cols, const Q8KRows& x, int64_t j,
                 SuperblockSum sum = superblock_sum);

}  // namespace splitspec

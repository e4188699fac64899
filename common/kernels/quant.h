#pragma once
// Converting weights between float and their stored types, and quantizing
// activations for the 32-weight block kernels. Free of LibTorch.
#include <cstdint>
#include <functional>
#include <vector>

#include "common/kernels/weight_type.h"

namespace splitspec {

// rows x cols floats into `dst` (rows * row_bytes(type, cols) bytes), with
// llama.cpp's reference quantizers for Q8_0 (d = max|x| / 127, q rounded
// half away from zero), Q4_0 and Q5_0 (d = the block's largest-magnitude
// value / -8 or -16, q = x/d + 8.5 or 16.5 truncated, at most 15 or 31), Q4_1
// and Q5_1 (d = range / 15 or 31, m = the least value), so such a block
// quantizes to the same bytes as llama.cpp's; IQ4_NL and the super-block
// types with simpler searches than llama-quantize's (kquant.h). 32-weight
// block types need cols % 32 == 0, super-block types cols % 256 == 0.
void quantize_rows(WType type, const float* src, int64_t rows, int64_t cols, void* dst);

// Rows [r0, r1) of `m` as floats into dst[(r1 - r0) * m.cols]: exact for
// F32, F16 and BF16; d * q for the quantized types. Plain or packed.
void dequantize_rows(const MatrixRef& m, int64_t r0, int64_t r1, float* dst);
// Every row of `m` as floats.
std::vector<float> dequantize_all(const MatrixRef& m);

// A plain 32-weight block's integer weights: Q8_0's int8s, Q4_0's nibbles
// less 8, Q5_0's 5-bit values less 16, Q4_1's and Q5_1's as stored (the min
// is separate), IQ4_NL's grid values; its d and (Q4_1, Q5_1) m.
void block_quants(WType t, const uint8_t* block, int8_t* q);
float block_d(const uint8_t* block);
float block_m(const uint8_t* block);

// Block b of row r of a quantized matrix, plain or packed, in the file's
// block layout (block_bytes(m.type) bytes: scale, then quants).
void read_block(const MatrixRef& m, int64_t r, int64_t b, uint8_t* out);

// Packs (or unpacks) a quantized matrix's rows bytes in place: plain <->
// packed (weight_type.h). `scratch` grows to one group's bytes.
void pack_rows(WType type, uint8_t* data, int64_t rows, int64_t cols, std::vector<uint8_t>& scratch);
void unpack_rows(WType type, uint8_t* data, int64_t rows, int64_t cols, std::vector<uint8_t>& scratch);
// Each whole group of `group_rows` rows (`row_bytes` apart) through
// `regroup` (into scratch, then copied back); rows past the last whole
// group stay as they are.
void regroup_in_place(uint8_t* data, int64_t rows, int64_t group_rows, int64_t row_bytes, std::vector<uint8_t>& scratch,
                      const std::function<void(const uint8_t* in, uint8_t* out)>& regroup);

// Whether every value (every scale, for quantized types) is finite; the
// index of the first bad row otherwise.
int64_t first_non_finite_row(const MatrixRef& m);

// Activations quantized for the 32-weight block kernels, per row and per block of
// 32: d = max|x| / 127 rounded to half precision (as llama.cpp does), q =
// x * (1/d) rounded half to even, and for the weights with a min the block's
// sum as llama.cpp's Q8_1 carries it, s = d * sum(q) with d before its
// rounding, the product rounded to half precision. Each row is quantized on
// its own, the same whatever else is in the batch.
struct QuantizedRows {
  int64_t rows = 0, cols = 0, blocks = 0;
  std::vector<int8_t> q;      // [rows][cols]
  std::vector<float> d;       // [rows][blocks]
  std::vector<int32_t> sum;   // [rows][blocks]: sum of the block's q's, for
                              // bodies that multiply weights stored above
                              // their value (unsigned bytes)
  std::vector<float> s;       // [rows][blocks]: Q8_1's s, for Q4_1 and Q5_1
};
void quantize_activations(const float* x, int64_t rows, int64_t cols, QuantizedRows& out);
// Sizes `out` for rows x cols; the bodies then fill block `b` of row `r`
// with quantize_block (or their vector copies of it, bit for bit the same).
void size_quantized(int64_t rows, int64_t cols, QuantizedRows& out);
void quantize_block(const float* x, int8_t* q, float* d, int32_t* sum, float* s);

}  // namespace splitspec

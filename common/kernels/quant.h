#pragma once
// Converting weights between float and their stored types, and quantizing
// activations for the Q8_0/Q4_0 kernels. Free of LibTorch.
#include <cstdint>
#include <functional>
#include <vector>

#include "common/kernels/weight_type.h"

namespace splitspec {

// rows x cols floats into `dst` (rows * row_bytes(type, cols) bytes), with
// llama.cpp's reference quantizers for Q8_0 (d = max|x| / 127, q rounded
// half away from zero) and Q4_0 (d = the block's largest-magnitude value /
// -8, q = x/d + 8.5 truncated, at most 15), so a block quantizes to the same
// bytes as llama.cpp's. Quantized types need cols % 32 == 0.
void quantize_rows(WType type, const float* src, int64_t rows, int64_t cols, void* dst);

// Rows [r0, r1) of `m` as floats into dst[(r1 - r0) * m.cols]: exact for
// F32, F16 and BF16; d * q for the quantized types. Plain or packed.
void dequantize_rows(const MatrixRef& m, int64_t r0, int64_t r1, float* dst);

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

// Activations quantized for the Q8_0/Q4_0 kernels, per row and per block of
// 32: d = max|x| / 127 rounded to half precision (as llama.cpp does), q =
// x * (1/d) rounded half to even. Each row is quantized on its own, the same
// whatever else is in the batch.
struct QuantizedRows {
  int64_t rows = 0, cols = 0, blocks = 0;
  std::vector<int8_t> q;      // [rows][cols]
  std::vector<float> d;       // [rows][blocks]
  std::vector<int32_t> sum;   // [rows][blocks]: sum of the block's q's, for
                              // bodies that multiply weights stored above
                              // their value (unsigned bytes)
};
void quantize_activations(const float* x, int64_t rows, int64_t cols, QuantizedRows& out);
// Sizes `out` for rows x cols; the bodies then fill block `b` of row `r`
// with quantize_block (or their vector copies of it, bit for bit the same).
void size_quantized(int64_t rows, int64_t cols, QuantizedRows& out);
void quantize_block(const float* x, int8_t* q, float* d, int32_t* sum);

}  // namespace splitspec

#pragma once
// What the unit tests check the kernels and the forward against, free of
// LibTorch: seeded random inputs, the plain arithmetic (accumulated in double)
// of linear, softmax and attention, and comparisons of float rows that say
// where they differ.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/model/rows.h"

namespace splitspec::test {

// `n` values of a normal distribution with deviation `scale`, drawn by a
// std::mt19937 seeded with `seed`.
std::vector<float> randn(int64_t n, uint64_t seed, float scale = 1.0f);

// x [n, in] times w [out, in] transposed: [n, out].
std::vector<float> reference_linear(const float* x, int64_t n, const float* w, int64_t out, int64_t in);
// The softmax of x[0..n) / temperature.
std::vector<double> reference_softmax(const float* x, int64_t n, double temperature = 1.0);
// One query row's attention over the rows `slots` of k and v ([slots, dim]
// each): softmax(k q * scale) v, [dim].
std::vector<float> reference_attention(const float* q, const float* k, const float* v, int64_t dim,
                                       const std::vector<int32_t>& slots, double scale);

// The parts' rows one after another, in one matrix.
Rows concat(const std::vector<Rows>& parts);
// A vector as one row.
inline RowsView as_row(const std::vector<float>& v) { return {v.data(), 1, static_cast<int64_t>(v.size())}; }

// The same shape and each value == its counterpart: bit for bit, but that
// 0 equals -0 and NaN nothing.
::testing::AssertionResult same_values(RowsView a, RowsView b);
// The same shape and |a - b| <= atol + rtol |b| for each value (equal
// infinities too; NaN is close to nothing).
::testing::AssertionResult all_close(RowsView a, RowsView b, double rtol = 1e-5, double atol = 1e-8);

}  // namespace splitspec::test

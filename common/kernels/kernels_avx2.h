#pragma once
// AVX2 + FMA bodies of kernels.h, built with -mavx2 -mfma and called only
// when the CPU has both (kernels.cpp decides). Same contracts as kernels.h.
#include <cstdint>
#include <vector>

namespace splitspec::kernels::avx2 {

// Weight rows [r0, r1) of linear(): y[:, r0:r1].
void linear_rows(const float* x, int64_t n, int64_t in, const float* w, int64_t out, float* y, int64_t r0, int64_t r1);
// Query row `q` of one head against the cache slots in `slots`.
void attention_row(const float* q, const float* k, const float* v, const std::vector<int32_t>& slots, int64_t head_dim,
                   float scale, std::vector<float>& scratch, float* out);
// The same over an F16 cache (needs F16C).
void attention_row(const float* q, const uint16_t* k, const uint16_t* v, const std::vector<int32_t>& slots,
                   int64_t head_dim, float scale, std::vector<float>& scratch, float* out);
void silu_mul(const float* gate, const float* up, int64_t count, float* y);
// Need F16C as well (kernels.cpp checks).
void half_to_float(const uint16_t* src, int64_t count, float* dst);
void float_to_half(const float* src, int64_t count, uint16_t* dst);
float sum_exp(const float* x, int64_t n, float max);

}  // namespace splitspec::kernels::avx2

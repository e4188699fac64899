#pragma once
// AVX2 + FMA bodies of kernels.h, built with -mavx2 -mfma and called only
// when the CPU has both (kernels.cpp decides). Same contracts as kernels.h.
#include <cstdint>
#include <vector>

#include "common/kernels/attention_rows.h"

namespace splitspec::kernels::avx2 {

// Weight rows [r0, r1) of linear(): y[:, r0:r1].
void linear_rows(const float* x, int64_t n, int64_t in, const float* w, int64_t out, float* y, int64_t r0, int64_t r1);
// Query row `q` of one head against the cache slots in `slots`.
void attention_row(const float* q, const float* k, const float* v, const std::vector<int32_t>& slots, int64_t head_dim,
                   float scale, std::vector<float>& scratch, float* out);
// The same over an F16 cache (needs F16C).
void attention_row(const float* q, const uint16_t* k, const uint16_t* v, const std::vector<int32_t>& slots,
                   int64_t head_dim, float scale, std::vector<float>& scratch, float* out);
// rows[0, n), n >= 1, at a head size attention_rows_handle takes: the
// query rows of one head (the same k and v), together; each row's result
// is attention_row's bits. Every row sees its first `shared` slots, the
// same ones in the same order. `scratch` holds attention_scratch floats,
// `scores` n pointers.
void attention_rows(const AttentionRow<float>* rows, int64_t n, int64_t shared, int64_t head_dim, float scale,
                    float* scratch, float** scores);
void attention_rows(const AttentionRow<uint16_t>* rows, int64_t n, int64_t shared, int64_t head_dim, float scale,
                    float* scratch, float** scores);
void silu_mul(const float* gate, const float* up, int64_t count, float* y);
// Need F16C as well (kernels.cpp checks).
void half_to_float(const uint16_t* src, int64_t count, float* dst);
void float_to_half(const float* src, int64_t count, uint16_t* dst);
float sum_exp(const float* x, int64_t n, float max);

}  // namespace splitspec::kernels::avx2

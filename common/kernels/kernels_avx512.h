#pragma once
// AVX-512 attention and silu_mul (kernels.h), built with -mavx512f
// -mavx512dq and called only when linear() runs its avx512 body (kernels.cpp
// decides). Same contracts as the avx2 ones, and the same bits.
#include <cstdint>

#include "common/kernels/attention_rows.h"

namespace splitspec::kernels::avx512 {

// rows[0, n), n >= 1, at a head size attention_rows_handle takes: the
// query rows of one head (the same k and v),
// together; each row's result is the same as alone. Every row sees its
// first `shared` slots, the same ones in the same order (the context of a
// chain or a tree; the same for every head, so the caller finds it once).
// `scratch` holds attention_scratch floats, `scores` n pointers. `next`, if
// not null, is a row of the head the caller runs next (over the same shared
// slots): its keys and values are requested while this call computes.
void attention_rows(const AttentionRow<float>* rows, int64_t n, int64_t shared, int64_t head_dim, float scale,
                    float* scratch, float** scores, const AttentionRow<float>* next);
void attention_rows(const AttentionRow<uint16_t>* rows, int64_t n, int64_t shared, int64_t head_dim, float scale,
                    float* scratch, float** scores, const AttentionRow<uint16_t>* next);

// kernels::silu_mul, with the avx2 path's bits.
void silu_mul(const float* gate, const float* up, int64_t count, float* y);

}  // namespace splitspec::kernels::avx512

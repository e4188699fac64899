#pragma once
// AVX-512 attention and silu_mul (kernels.h), built with -mavx512f
// -mavx512dq and called only when linear() runs its avx512 body (kernels.cpp
// decides). Same contracts as the avx2 ones, and the same bits.
#include <cstdint>

namespace splitspec::kernels::avx512 {

// One query row of one head against its visible cache slots. Plain
// pointers: the avx512 translation unit instantiates no library template,
// whose one copy the linker keeps could be its AVX-512 one.
template <class T>
struct AttentionRow {
  const float* q;
  const T* k;
  const T* v;
  const int32_t* slots;
  int64_t m;  // slots
  float* out;
};

// Floats of scratch attention_rows needs for rows[0, n): each row's scores
// padded to 8, its partial sums and its normalizer.
template <class T>
int64_t attention_scratch(const AttentionRow<T>* rows, int64_t n, int64_t head_dim) {
  int64_t total = n * (head_dim + 1);
  for (int64_t r = 0; r < n; ++r) total += (rows[r].m + 7) & ~int64_t{7};
  return total;
}

// Head sizes attention_rows takes (32, 64, 96 and 128); others go
// to avx2::attention_row.
bool attention_handles(int64_t head_dim);
// rows[0, n), n >= 1: the query rows of one head (the same k and v),
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

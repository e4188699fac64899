#pragma once
// AVX-512 attention (kernels.h), built with -mavx512f -mavx512dq and called
// only when linear() runs its avx512 body (kernels.cpp decides). Same
// contract as avx2::attention_row, and the same bits.
#include <cstdint>
#include <vector>

namespace splitspec::kernels::avx512 {

// One query row of one head against its visible cache slots.
template <class T>
struct AttentionRow {
  const float* q;
  const T* k;
  const T* v;
  const std::vector<int32_t>* slots;
  float* out;
};

// Head sizes attention_rows takes (32, 64, 96 and 128); others go
// to avx2::attention_row.
bool attention_handles(int64_t head_dim);
// rows[0, n): the query rows of one head (the same k and v), together;
// each row's result is the same as alone.
void attention_rows(const AttentionRow<float>* rows, int64_t n, int64_t head_dim, float scale,
                    std::vector<float>& scratch);
void attention_rows(const AttentionRow<uint16_t>* rows, int64_t n, int64_t head_dim, float scale,
                    std::vector<float>& scratch);

}  // namespace splitspec::kernels::avx512

#pragma once
// The query rows of one head that the avx2 and avx512 attention bodies take
// together (kernels_avx2.h, kernels_avx512.h), and the scratch they need.
// Plain pointers: the avx512 translation unit instantiates no library
// template, whose one copy the linker keeps could be its AVX-512 one.
#include <cstdint>

namespace splitspec::kernels {

// One query row of one head against its visible cache slots.
template <class T>
struct AttentionRow {
  const float* q;
  const T* k;
  const T* v;
  const int32_t* slots;
  int64_t m;  // slots
  float* out;
};

// Floats of scratch the bodies need for rows[0, n): each row's scores
// padded to 8, its partial sums and its normalizer.
template <class T>
int64_t attention_scratch(const AttentionRow<T>* rows, int64_t n, int64_t head_dim) {
  int64_t total = n * (head_dim + 1);
  for (int64_t r = 0; r < n; ++r) total += (rows[r].m + 7) & ~int64_t{7};
  return total;
}

// Lays attention_scratch's floats out: p[r], each row's scores padded to
// 8; then the rows' partial sums (n * head_dim), which it returns; then
// their normalizers (n). Static: both bodies call it, from translation
// units built for different instruction sets, and the one copy the linker
// would keep of an inline function could be the AVX-512 one.
template <class T>
static float* lay_out_scratch(const AttentionRow<T>* rows, int64_t n, float* scratch, float** p) {
  int64_t at = 0;
  for (int64_t r = 0; r < n; ++r) {
    p[r] = scratch + at;
    at += (rows[r].m + 7) & ~int64_t{7};
  }
  return scratch + at;
}

// Head sizes the bodies take together (32, 64, 96 and 128); rows of other
// sizes go one at a time.
inline bool attention_rows_handle(int64_t head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128;
}

}  // namespace splitspec::kernels

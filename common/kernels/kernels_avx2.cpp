// Built with -mavx2 -mfma -ffp-contract=off; see kernels.h for why every
// output must come from one fixed instruction sequence.
#include "common/kernels/kernels_avx2.h"

#include <immintrin.h>
#include <sleef.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/kernels/avx2_reduce.h"
#include "common/kernels/kernels.h"

namespace splitspec::kernels::avx2 {

namespace {

// Eight cache elements as floats: an F16 cache's halves widen exactly, so
// both types run the same arithmetic on the values they hold.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// The first n < 8 elements, zeros after.
inline __m256 load_tail(const float* p, int64_t, __m256i mask) { return _mm256_maskload_ps(p, mask); }
inline __m256 load_tail(const uint16_t* p, int64_t n, __m256i) {
  uint16_t b[8] = {};
  std::memcpy(b, p, static_cast<size_t>(n) * sizeof(uint16_t));
  return load8(b);
}

// Four independent dot products at once: one alone is a chain of dependent
// multiply-adds, latency-bound. Each result still has its own fixed sequence.
template <class T>
inline void dot4(const float* q, const T* k0, const T* k1, const T* k2, const T* k3, int64_t len, float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t full = len & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
    a0 = _mm256_fmadd_ps(qv, load8(k0 + i), a0);
    a1 = _mm256_fmadd_ps(qv, load8(k1 + i), a1);
    a2 = _mm256_fmadd_ps(qv, load8(k2 + i), a2);
    a3 = _mm256_fmadd_ps(qv, load8(k3 + i), a3);
  }
  if (full < len) {
    const int64_t rest = len - full;
    const __m256i m = tail_mask(rest);
    const __m256 qv = _mm256_maskload_ps(q + full, m);
    a0 = _mm256_fmadd_ps(qv, load_tail(k0 + full, rest, m), a0);
    a1 = _mm256_fmadd_ps(qv, load_tail(k1 + full, rest, m), a1);
    a2 = _mm256_fmadd_ps(qv, load_tail(k2 + full, rest, m), a2);
    a3 = _mm256_fmadd_ps(qv, load_tail(k3 + full, rest, m), a3);
  }
  out[0] = hsum(a0);
  out[1] = hsum(a1);
  out[2] = hsum(a2);
  out[3] = hsum(a3);
}

// out[d] = sum_c p[c] * v[slot_c][d] * inv_total, accumulated over c in
// order. C = D / 8 known at compile time keeps the accumulators in registers;
// C = 0 handles any D (with a masked last vector), accumulating in memory.
template <int C, class T>
void weighted_sum(const float* p, const T* v, const std::vector<int32_t>& slots, int64_t D, float inv_total,
                  float* out) {
  constexpr int kMax = kMaxHeadDim / 8;
  __m256 o[C > 0 ? C : kMax];
  const int64_t chunks = C > 0 ? C : (D + 7) / 8, full = C > 0 ? C : D / 8;
  const int64_t rest = D - full * 8;
  const __m256i tm = tail_mask(rest);
  for (int64_t d = 0; d < chunks; ++d) o[d] = _mm256_setzero_ps();
  for (size_t c = 0; c < slots.size(); ++c) {
    const __m256 pc = _mm256_set1_ps(p[c]);
    const T* vs = v + static_cast<int64_t>(slots[c]) * D;
    for (int64_t d = 0; d < full; ++d) o[d] = _mm256_fmadd_ps(pc, load8(vs + 8 * d), o[d]);
    if (full < chunks) o[full] = _mm256_fmadd_ps(pc, load_tail(vs + 8 * full, rest, tm), o[full]);
  }
  const __m256 inv = _mm256_set1_ps(inv_total);
  for (int64_t d = 0; d < full; ++d) _mm256_storeu_ps(out + 8 * d, _mm256_mul_ps(o[d], inv));
  if (full < chunks) _mm256_maskstore_ps(out + 8 * full, tm, _mm256_mul_ps(o[full], inv));
}

// Turns the scores p[0, m) into exp(score - max) in place, zeros up to the
// next multiple of 8 (p must have room), and returns 1 / their sum.
// kernels_avx512.cpp's softmax_exps is this sequence 16 lanes wide: change
// both or neither.
float softmax_exps(float* p, int64_t m) {
  const int64_t padded = (m + 7) & ~int64_t{7};
  std::fill(p + m, p + padded, -std::numeric_limits<float>::infinity());  // exp -> exactly 0
  // The maximum eight lanes at a time (a scalar chain cost a tenth of a
  // row's attention). The maximum is the same in any order; only where a
  // score is NaN could it differ, and then every output is NaN either way.
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t c = 0; c < padded; c += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(p + c));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  const float mx = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
  // exp(score - max) eight lanes at a time; the sum's order depends only on m.
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t c = 0; c < padded; c += 8) {
    const __m256 e = Sleef_finz_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(p + c), vmx));
    _mm256_storeu_ps(p + c, e);
    acc = _mm256_add_ps(acc, e);
  }
  return 1.0f / hsum(acc);
}

template <class T>
void attention_row_of(const float* q, const T* k, const T* v, const std::vector<int32_t>& slots, int64_t D,
                      float scale, std::vector<float>& p, float* out) {
  const int64_t m = static_cast<int64_t>(slots.size());
  const int64_t padded = (m + 7) & ~int64_t{7};
  p.resize(padded);
  // Scores in groups of four slots; a partial last group repeats slot 0 into
  // the unused places, whose results are overwritten by the padding below.
  for (int64_t c = 0; c < m; c += 4) {
    const T* kp[4];
    for (int i = 0; i < 4; ++i) kp[i] = k + static_cast<int64_t>(slots[c + i < m ? c + i : 0]) * D;
    float s[4];
    dot4(q, kp[0], kp[1], kp[2], kp[3], D, s);
    for (int i = 0; i < 4 && c + i < m; ++i) p[c + i] = s[i] * scale;
  }
  const float inv_total = softmax_exps(p.data(), m);

  switch (D) {
    case 64: weighted_sum<8>(p.data(), v, slots, D, inv_total, out); break;
    case 128: weighted_sum<16>(p.data(), v, slots, D, inv_total, out); break;
    case 32: weighted_sum<4>(p.data(), v, slots, D, inv_total, out); break;
    default: weighted_sum<0>(p.data(), v, slots, D, inv_total, out); break;
  }
}

// Rows together (attention_rows): the same sequence for each output as
// attention_row_of, laid out so that a head's keys and values, read from
// memory once, serve every row from the L1 cache. A row at a time, each of
// a forward's rows read them again from L2, which at 8 rows cost 2.9x one
// row's attention on a Zen 3 core. Nothing is requested ahead, unlike the
// avx512 body: a head's slots are mostly consecutive rows, which the
// hardware prefetcher follows, and on Zen 3 requesting the next groups'
// keys and values cost 4-16% at one row for 5-10% at eight.

// Scores of the 4 slots kp[0, 4) at c for Q query rows: p[qq][c + j] for
// those below m. Each is dot4's: one accumulator chain per slot and row,
// summed by hsum; a key load serves Q rows.
template <int D8, int Q, class T>
inline void score_group(const float* const* q, const T* const kp[4], float scale, float* const* p, int64_t c,
                        int64_t m) {
  __m256 a[Q][4];
#pragma GCC unroll 4
  for (int qq = 0; qq < Q; ++qq)
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) a[qq][r] = _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int i = 0; i < D8; ++i) {
    __m256 kv[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) kv[r] = load8(kp[r] + 8 * i);
#pragma GCC unroll 4
    for (int qq = 0; qq < Q; ++qq) {
      const __m256 qv = _mm256_loadu_ps(q[qq] + 8 * i);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) a[qq][r] = _mm256_fmadd_ps(qv, kv[r], a[qq][r]);
    }
  }
  for (int qq = 0; qq < Q; ++qq)
    for (int r = 0; r < 4 && c + r < m; ++r) p[qq][c + r] = hsum(a[qq][r]) * scale;
}

// The 4 slot pointers of the group at c; a partial last group repeats slot
// 0 in the unused places (their scores are dropped).
template <class T>
inline void group_keys(const T* k, const int32_t* slots, int64_t m, int64_t c, int64_t D, const T* kp[4]) {
  for (int i = 0; i < 4; ++i) kp[i] = k + static_cast<int64_t>(slots[c + i < m ? c + i : 0]) * D;
}

// p[r][c] = (q_r . k[slots_r[c]]) * scale for every row: the first
// `shared` slots (the same for all rows) in whole groups of 4, each group
// for the rows two at a time while its keys are in L1; then each row's own
// rest.
template <int D8, class T>
void scores(const AttentionRow<T>* rows, int64_t n, int64_t shared, float scale, float* const* p) {
  constexpr int64_t D = 8 * D8;
  const T* kp[4];
  int64_t c0 = 0;
  for (; c0 + 4 <= shared; c0 += 4) {
    group_keys(rows[0].k, rows[0].slots, shared, c0, D, kp);
    int64_t r = 0;
    for (; r + 2 <= n; r += 2) {
      const float* const q[2] = {rows[r].q, rows[r + 1].q};
      score_group<D8, 2>(q, kp, scale, p + r, c0, shared);
    }
    if (r < n) score_group<D8, 1>(&rows[r].q, kp, scale, p + r, c0, shared);
  }
  for (int64_t r = 0; r < n; ++r) {
    const int64_t m = rows[r].m;
    for (int64_t c = c0; c < m; c += 4) {
      group_keys(rows[r].k, rows[r].slots, m, c, D, kp);
      score_group<D8, 1>(&rows[r].q, kp, scale, p + r, c, m);
    }
  }
}

// o[0, Q)[0, H) += p_q[c] * v[slots[c]][8 * h0, 8 * (h0 + H)) for slots
// [c0, c1), in slot order as weighted_sum's chains; a value load serves Q
// rows.
template <int Q, int H, class T>
inline void accumulate(__m256 (&o)[Q][H], const float* const* p, const T* v, const int32_t* slots, int64_t c0,
                       int64_t c1, int64_t D, int64_t h0) {
  for (int64_t c = c0; c < c1; ++c) {
    __m256 pc[Q];
#pragma GCC unroll 4
    for (int qq = 0; qq < Q; ++qq) pc[qq] = _mm256_set1_ps(p[qq][c]);
    const T* vs = v + static_cast<int64_t>(slots[c]) * D + 8 * h0;
#pragma GCC unroll 8
    for (int d = 0; d < H; ++d) {
      const __m256 vv = load8(vs + 8 * d);
#pragma GCC unroll 4
      for (int qq = 0; qq < Q; ++qq) o[qq][d] = _mm256_fmadd_ps(pc[qq], vv, o[qq][d]);
    }
  }
}

// Rows [r, r + Q): their sums over the shared slots [c0, c1), H vectors of
// a row at a time (2 rows of 4 are 8 chains, enough to cover the
// multiply-add latency, in 11 registers), from and to `partial` (zeros
// first; floats round-trip exactly).
template <int C, int Q, int H, class T>
inline void shared_block(const AttentionRow<T>* rows, int64_t r, float* const* p, float* partial, int64_t c0,
                         int64_t c1) {
  for (int64_t h0 = 0; h0 < C; h0 += H) {
    __m256 o[Q][H];
    for (int qq = 0; qq < Q; ++qq)
      for (int d = 0; d < H; ++d)
        o[qq][d] = c0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(partial + ((r + qq) * C + h0 + d) * 8);
    accumulate<Q, H>(o, p + r, rows[r].v, rows[r].slots, c0, c1, 8 * C, h0);
    for (int qq = 0; qq < Q; ++qq)
      for (int d = 0; d < H; ++d) _mm256_storeu_ps(partial + ((r + qq) * C + h0 + d) * 8, o[qq][d]);
  }
}

// Vectors of a row alone a pass takes: up to 8 chains, a whole number of
// passes (C is 4, 8, 12 or 16).
template <int C>
constexpr int kOneRow = C <= 8 ? C : C % 8 == 0 ? 8 : C / 2;

// Row r's own slots after the shared ones, then out = sum * inv.
template <int C, class T>
inline void finish_row(const AttentionRow<T>& row, const float* p, const float* partial, int64_t shared, float inv) {
  constexpr int H = kOneRow<C>;
  const __m256 iv = _mm256_set1_ps(inv);
  for (int64_t h0 = 0; h0 < C; h0 += H) {
    __m256 o[1][H];
    for (int d = 0; d < H; ++d) o[0][d] = shared == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(partial + (h0 + d) * 8);
    accumulate<1, H>(o, &p, row.v, row.slots, shared, row.m, 8 * C, h0);
    for (int d = 0; d < H; ++d) _mm256_storeu_ps(row.out + 8 * (h0 + d), _mm256_mul_ps(o[0][d], iv));
  }
}

// out_r = sum_c p_r[c] * v[slots_r[c]] * inv_r: the shared slots in blocks
// of 16 KB of values, each block for the rows two at a time while in L1,
// then each row's rest.
template <int C, class T>
void weighted_sums(const AttentionRow<T>* rows, int64_t n, int64_t shared, float* const* p, const float* inv,
                   float* partial) {
  constexpr int H = 4;  // C is 4, 8, 12 or 16
  static_assert(C % H == 0);
  constexpr int64_t kValues = 16384 / (8 * C * sizeof(T));
  for (int64_t c0 = 0; c0 < shared; c0 += kValues) {
    const int64_t c1 = shared < c0 + kValues ? shared : c0 + kValues;
    int64_t r = 0;
    for (; r + 2 <= n; r += 2) shared_block<C, 2, H>(rows, r, p, partial, c0, c1);
    if (r < n) shared_block<C, 1, kOneRow<C>>(rows, r, p, partial, c0, c1);
  }
  for (int64_t r = 0; r < n; ++r) finish_row<C>(rows[r], p[r], partial + r * C * 8, shared, inv[r]);
}

template <int D8, class T>
void rows_at(const AttentionRow<T>* rows, int64_t n, int64_t shared, float scale, float* scratch, float** p) {
  float* const partial = lay_out_scratch(rows, n, scratch, p);
  float* const inv = partial + n * 8 * D8;
  scores<D8>(rows, n, shared, scale, p);
  for (int64_t r = 0; r < n; ++r) inv[r] = softmax_exps(p[r], rows[r].m);
  weighted_sums<D8>(rows, n, shared, p, inv, partial);
}

template <class T>
void rows_of(const AttentionRow<T>* rows, int64_t n, int64_t shared, int64_t D, float scale, float* scratch,
             float** p) {
  switch (D) {
    case 32: rows_at<4>(rows, n, shared, scale, scratch, p); break;
    case 64: rows_at<8>(rows, n, shared, scale, scratch, p); break;
    case 96: rows_at<12>(rows, n, shared, scale, scratch, p); break;
    default: rows_at<16>(rows, n, shared, scale, scratch, p); break;
  }
}

}  // namespace

void attention_row(const float* q, const float* k, const float* v, const std::vector<int32_t>& slots, int64_t D,
                   float scale, std::vector<float>& scratch, float* out) {
  attention_row_of(q, k, v, slots, D, scale, scratch, out);
}

void attention_row(const float* q, const uint16_t* k, const uint16_t* v, const std::vector<int32_t>& slots,
                   int64_t D, float scale, std::vector<float>& scratch, float* out) {
  attention_row_of(q, k, v, slots, D, scale, scratch, out);
}

void attention_rows(const AttentionRow<float>* rows, int64_t n, int64_t shared, int64_t D, float scale,
                    float* scratch, float** scores) {
  rows_of(rows, n, shared, D, scale, scratch, scores);
}

void attention_rows(const AttentionRow<uint16_t>* rows, int64_t n, int64_t shared, int64_t D, float scale,
                    float* scratch, float** scores) {
  rows_of(rows, n, shared, D, scale, scratch, scores);
}

void silu_mul(const float* gate, const float* up, int64_t count, float* y) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t i = 0; i < count; i += 8) {
    // The last partial vector goes through the same instructions, masked.
    const __m256i m = tail_mask(std::min<int64_t>(8, count - i));
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    const __m256 u = _mm256_maskload_ps(up + i, m);
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, Sleef_finz_expf8_u10avx2(_mm256_sub_ps(zero, g))));
    _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(s, u));
  }
}

float sum_exp(const float* x, int64_t n, float max) {
  const __m256 vmx = _mm256_set1_ps(max);
  __m256 acc = _mm256_setzero_ps();
  const int64_t full = n & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8)
    acc = _mm256_add_ps(acc, Sleef_finz_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx)));
  float s = hsum(acc);
  for (int64_t i = full; i < n; ++i) s += std::exp(x[i] - max);
  return s;
}

void half_to_float(const uint16_t* src, int64_t count, float* dst) {
  const int64_t full = count & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (int64_t i = full; i < count; ++i) dst[i] = _cvtsh_ss(src[i]);
}

void float_to_half(const float* src, int64_t count, uint16_t* dst) {
  constexpr int kNearestEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const int64_t full = count & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kNearestEven));
  for (int64_t i = full; i < count; ++i) dst[i] = _cvtss_sh(src[i], kNearestEven);
}

}  // namespace splitspec::kernels::avx2

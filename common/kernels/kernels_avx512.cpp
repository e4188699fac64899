// Attention and silu_mul with AVX-512, built with -mavx2 -mfma -mf16c
// -mavx512f -mavx512dq -ffp-contract=off. silu_mul is the avx2 one 16 lanes
// wide. Every attention output follows avx2::attention_row's
// sequence of operations, so the bits are that path's; the work is laid out
// for the wider registers and for the caches:
// - all query rows of a head at once: a forward's rows (a chain, a tree's
//   branches) see the same context first, and one head's keys and values
//   (66 KB at 129 slots of 64 floats) do not fit the L1 cache, so a row at a
//   time read them from L2 once per row, the bound it ran at;
// - scores: two cache slots a register (slot a's 8 lanes low, b's high)
//   against the query's 8 inputs in both halves, as linear_avx512.cpp does
//   for weight rows, and sum_lanes8 ends 16 of them at once; over the shared
//   context, each group of 16 keys serves every row while in L1, four rows
//   at a time;
// - weighted sums: each output lane is one chain of fused multiply-adds as
//   long as the row's visible slots, so a row alone waits on the latency;
//   several rows' chains interleave, sharing each value load, block by block
//   of the context (partial sums round-trip through memory exactly);
// - keys requested a group ahead and values while the scores run, and the
//   next head's keys and values a few lines at a time while this head
//   computes: in a forward they come from memory;
// - exponentials 16 lanes wide, still summed 8 lanes at a time.
#include "common/kernels/kernels_avx512.h"

#include <immintrin.h>
#include <sleef.h>

// GCC 12's AVX-512 headers build their "undefined" vectors as `__Y = __Y`,
// which -Wall reports at every inlined conversion.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "common/kernels/avx2_reduce.h"
#include "common/kernels/avx512_reduce.h"

namespace splitspec::kernels::avx512 {

namespace {

using avx512_reduce::sum_lanes8;

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// Eight elements of a (low half) and of b (high half), as floats, exactly.
inline __m512 load_pair(const float* a, const float* b) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(a)), _mm256_loadu_ps(b), 1);
}
inline __m512 load_pair(const uint16_t* a, const uint16_t* b) {
  return _mm512_cvtph_ps(
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1));
}

// The next head's keys (or values), requested a few cache lines at a time
// while this head computes, in slot order. A burst of requests is mostly
// dropped on this machine's cores: 512 KB requested at once and then 200 us
// idle still read as slowly as from memory, 16 lines per 0.3 us as fast as
// from the cache. Left to the hardware, each head's rows start from memory
// after the previous head's arithmetic: in a forward, an 8-row call spent
// as long waiting as computing.
struct Trickle {
  const char* base = nullptr;
  const int32_t* slots = nullptr;
  int64_t row_bytes = 0, end = 0;
  int per_step = 0;  // lines per step()
  int64_t c = 0, line = 0;
  void step() {
    for (int i = 0; i < per_step && c < end; ++i) {
      __builtin_prefetch(base + slots[c] * row_bytes + line, 0, 3);
      line += 64;
      if (line == row_bytes) {
        line = 0;
        ++c;
      }
    }
  }
};

// The first n lanes (all 16 from n = 16 on).
inline __mmask16 first_lanes(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }

// Scores of the 16 slots kp[0, 16) at c for Q query rows: p[qq][c + j]
// for those below m. Four slot pairs at a time take their D / 8 steps
// together, so a query load serves four pairs and a key load Q rows (4Q
// accumulators, four keys and a query in registers); the first four pairs'
// sums wait in memory for the last four.
template <int D8, int Q, class T>
inline void score_group(const float* const q[Q], const T* const kp[16], float scale, float* const p[Q], int64_t c,
                        int64_t m) {
  __m512 acc[Q][8];
#pragma GCC unroll 2
  for (int half = 0; half < 2; ++half) {
    __m512 a[Q][4];
#pragma GCC unroll 4
    for (int qq = 0; qq < Q; ++qq)
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) a[qq][r] = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < D8; ++i) {
      __m512 kv[4];
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) kv[r] = load_pair(kp[8 * half + 2 * r] + 8 * i, kp[8 * half + 2 * r + 1] + 8 * i);
#pragma GCC unroll 4
      for (int qq = 0; qq < Q; ++qq) {
        const __m512 qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(q[qq] + 8 * i));
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) a[qq][r] = _mm512_fmadd_ps(kv[r], qv, a[qq][r]);
      }
    }
#pragma GCC unroll 4
    for (int qq = 0; qq < Q; ++qq)
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[qq][4 * half + r] = a[qq][r];
  }
  // sums[4h + r] is slot c + 4r + h (sum_lanes8): one permutation puts them
  // in slot order, and a masked store keeps those below m.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __mmask16 keep = first_lanes(m - c);
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int qq = 0; qq < Q; ++qq) {
    alignas(64) float sums[16];
    sum_lanes8(acc[qq], sums);
    _mm512_mask_storeu_ps(p[qq] + c, keep, _mm512_mul_ps(_mm512_permutexvar_ps(order, _mm512_load_ps(sums)), vscale));
  }
}

// Requests the cache lines of slots [c0, c1)'s rows (`row` elements each):
// a forward's keys and values come from memory (the weights stream through
// the caches between layers), and asked for ahead they arrive while the
// slots before them compute.
// Locality as __builtin_prefetch's: 3 for every cache level (prefetcht0),
// 2 for L2 and beyond (prefetcht1). (GCC's _mm_prefetch takes an enum,
// clang's a macro argument: the builtin builds with both.)
template <int Locality, class T>
inline void prefetch_slots(const T* base, const int32_t* slots, int64_t c0, int64_t c1, int64_t row) {
  for (int64_t c = c0; c < c1; ++c) {
    const char* at = reinterpret_cast<const char*>(base + static_cast<int64_t>(slots[c]) * row);
    for (int64_t l = 0; l < row * static_cast<int64_t>(sizeof(T)); l += 64)
      __builtin_prefetch(at + l, 0, Locality);
  }
}

// The 16 slot pointers of the group at c; a partial last group repeats slot
// 0 in the unused places (their scores are dropped).
template <class T>
inline void group_keys(const T* k, const int32_t* slots, int64_t m, int64_t c, int64_t D, const T* kp[16]) {
  for (int i = 0; i < 16; ++i) kp[i] = k + static_cast<int64_t>(slots[c + i < m ? c + i : 0]) * D;
}

// p[r][c] = (q_r . k[slots_r[c]]) * scale for every row: the first
// `shared` slots (the same for all rows) in whole groups of 16, each group
// for the rows four at a time; then each row's own rest.
template <int D8, class T>
void scores(const AttentionRow<T>* rows, int64_t n, int64_t shared, float scale, float* const* p, Trickle* next) {
  constexpr int64_t D = 8 * D8;
  const T* kp[16];
  int64_t c0 = 0;
  for (; c0 + 16 <= shared; c0 += 16) {
    group_keys(rows[0].k, rows[0].slots, shared, c0, D, kp);
    // The next group's keys, and this group's values for the weighted sums.
    prefetch_slots<3>(rows[0].k, rows[0].slots, c0 + 16, c0 + 32 < shared ? c0 + 32 : shared, D);
    prefetch_slots<2>(rows[0].v, rows[0].slots, c0, c0 + 16, D);
    int64_t r = 0;
    for (; r + 4 <= n; r += 4) {
      const float* const q[4] = {rows[r].q, rows[r + 1].q, rows[r + 2].q, rows[r + 3].q};
      if (next != nullptr) next->step();
      score_group<D8, 4>(q, kp, scale, p + r, c0, shared);
    }
    if (r + 2 <= n) {
      const float* const q[2] = {rows[r].q, rows[r + 1].q};
      if (next != nullptr) next->step();
      score_group<D8, 2>(q, kp, scale, p + r, c0, shared);
      r += 2;
    }
    if (r < n) {
      if (next != nullptr) next->step();
      score_group<D8, 1>(&rows[r].q, kp, scale, p + r, c0, shared);
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    const int64_t m = rows[r].m;
    for (int64_t c = c0; c < m; c += 16) {
      group_keys(rows[r].k, rows[r].slots, m, c, D, kp);
      score_group<D8, 1>(&rows[r].q, kp, scale, p + r, c, m);
    }
  }
}

// o[0, Q) += p_q[c] * v[slots[c]] for slots [c0, c1), one value load
// serving the Q rows.
template <int C, int Q, class T>
inline void accumulate(__m512 (&o)[Q][C], const float* const* p, const T* v, const int32_t* slots, int64_t c0,
                       int64_t c1, Trickle* next = nullptr) {
  for (int64_t c = c0; c < c1; ++c) {
    if (next != nullptr && (c & 3) == 0) next->step();
    __m512 pc[Q];
#pragma GCC unroll 8
    for (int qq = 0; qq < Q; ++qq) pc[qq] = _mm512_set1_ps(p[qq][c]);
    const T* vs = v + static_cast<int64_t>(slots[c]) * (16 * C);
#pragma GCC unroll 8
    for (int d = 0; d < C; ++d) {
      const __m512 vv = load16(vs + 16 * d);
#pragma GCC unroll 8
      for (int qq = 0; qq < Q; ++qq) o[qq][d] = _mm512_fmadd_ps(pc[qq], vv, o[qq][d]);
    }
  }
}

// Rows [r, r + Q): their sums over the shared slots [c0, c1), from and to
// `partial` (zeros first).
template <int C, int Q, class T>
inline void shared_block(const AttentionRow<T>* rows, int64_t r, float* const* p, float* partial, int64_t c0,
                         int64_t c1, Trickle* next) {
  __m512 o[Q][C];
#pragma GCC unroll 8
  for (int qq = 0; qq < Q; ++qq)
#pragma GCC unroll 8
    for (int d = 0; d < C; ++d)
      o[qq][d] = c0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(partial + ((r + qq) * C + d) * 16);
  accumulate<C, Q>(o, p + r, rows[r].v, rows[r].slots, c0, c1, next);
#pragma GCC unroll 8
  for (int qq = 0; qq < Q; ++qq)
#pragma GCC unroll 8
    for (int d = 0; d < C; ++d) _mm512_storeu_ps(partial + ((r + qq) * C + d) * 16, o[qq][d]);
}

// Row r's own slots after the shared ones, then out = sum * inv.
template <int C, class T>
inline void finish_row(const AttentionRow<T>& row, const float* p, const float* partial, int64_t shared, float inv) {
  __m512 o[1][C];
#pragma GCC unroll 8
  for (int d = 0; d < C; ++d) o[0][d] = shared == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(partial + d * 16);
  accumulate<C, 1>(o, &p, row.v, row.slots, shared, row.m);
  const __m512 iv = _mm512_set1_ps(inv);
  for (int d = 0; d < C; ++d) _mm512_storeu_ps(row.out + 16 * d, _mm512_mul_ps(o[0][d], iv));
}

// Rows a pass of the weighted sums takes at head size 16 * C.
template <int C>
constexpr int kSumRows = C <= 2 ? 8 : C <= 4 ? 4 : 2;

// out_r = sum_c p_r[c] * v[slots_r[c]] * inv_r: the shared slots in blocks
// of about 16 KB of values, each block for the rows kRows at a time (16
// accumulator chains where the head is small, enough to cover the
// multiply-add latency, and a value load serving them all), then each row's
// rest.
template <int D8, class T>
void weighted_sums(const AttentionRow<T>* rows, int64_t n, int64_t shared, float* const* p, const float* inv,
                   float* partial, Trickle* next) {
  constexpr int C = D8 / 2;
  constexpr int kRows = kSumRows<C>;
  constexpr int64_t kValues = 16384 / (16 * C * sizeof(T));
  constexpr int64_t kBlock = kValues > 16 ? kValues : 16;
  for (int64_t c0 = 0; c0 < shared; c0 += kBlock) {
    const int64_t c1 = shared < c0 + kBlock ? shared : c0 + kBlock;
    int64_t r = 0;
    for (; r + kRows <= n; r += kRows) shared_block<C, kRows>(rows, r, p, partial, c0, c1, next);
    for (; r + 2 <= n; r += 2) shared_block<C, 2>(rows, r, p, partial, c0, c1, next);
    if (r < n) shared_block<C, 1>(rows, r, p, partial, c0, c1, next);
  }
  for (int64_t r = 0; r < n; ++r) finish_row<C>(rows[r], p[r], partial + r * C * 16, shared, inv[r]);
}

// Turns the scores p[0, m) into exp(score - max) in place, zeros up to the
// next multiple of 8, and returns 1 / their sum, as kernels_avx2.cpp's
// softmax_exps does (change both or neither): SLEEF's deterministic exp
// (finz_) gives the same bits 16 lanes wide as 8 wide, and the sum still
// adds 8 lanes at a time in slot order.
float softmax_exps(float* p, int64_t m) {
  const int64_t padded = (m + 7) & ~int64_t{7}, wide = padded & ~int64_t{15};
  for (int64_t c = m; c < padded; ++c) p[c] = -__builtin_inff();  // exp -> exactly 0
  // The maximum is the same in any order.
  __m512 vmax = _mm512_set1_ps(-__builtin_inff());
  for (int64_t c = 0; c < wide; c += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(p + c));
  if (wide < padded) vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(vmax, 0x00ff, p + wide));
  const float mx = _mm512_reduce_max_ps(vmax);
  const __m512 vmx = _mm512_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t c = 0; c < wide; c += 16) {
    const __m512 e = Sleef_finz_expf16_u10avx512f(_mm512_sub_ps(_mm512_loadu_ps(p + c), vmx));
    _mm512_storeu_ps(p + c, e);
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
    acc = _mm256_add_ps(acc, _mm512_extractf32x8_ps(e, 1));
  }
  if (wide < padded) {
    const __m256 e = Sleef_finz_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(p + wide), _mm512_castps512_ps256(vmx)));
    _mm256_storeu_ps(p + wide, e);
    acc = _mm256_add_ps(acc, e);
  }
  return 1.0f / avx2::hsum(acc);
}

template <int D8, class T>
void rows_at(const AttentionRow<T>* rows, int64_t n, int64_t shared, float scale, float* scratch, float** p,
             const AttentionRow<T>* next) {
  float* const partial = lay_out_scratch(rows, n, scratch, p);
  float* const inv = partial + n * 8 * D8;
  // The next head's keys spread over the score groups' calls, its values
  // over the weighted sums' steps (every fourth slot of each pass of rows).
  Trickle keys, values;
  if (next != nullptr) {
    const int64_t row_bytes = 8 * D8 * sizeof(T), lines = shared * row_bytes / 64;
    const int64_t passes = (n + kSumRows<D8 / 2> - 1) / kSumRows<D8 / 2>;
    const int64_t calls = shared / 16 * ((n + 3) / 4), steps = shared / 4 * passes;
    keys = {reinterpret_cast<const char*>(next->k), next->slots, row_bytes, shared,
            static_cast<int>(calls > 0 ? (lines + calls - 1) / calls : 0)};
    values = {reinterpret_cast<const char*>(next->v), next->slots, row_bytes, shared,
              static_cast<int>(steps > 0 ? (lines + steps - 1) / steps : 0)};
  }
  scores<D8>(rows, n, shared, scale, p, next != nullptr ? &keys : nullptr);
  for (int64_t r = 0; r < n; ++r) inv[r] = softmax_exps(p[r], rows[r].m);
  weighted_sums<D8>(rows, n, shared, p, inv, partial, next != nullptr ? &values : nullptr);
}

template <class T>
void rows_of(const AttentionRow<T>* rows, int64_t n, int64_t shared, int64_t D, float scale, float* scratch,
             float** p, const AttentionRow<T>* next) {
  switch (D) {
    case 32: rows_at<4>(rows, n, shared, scale, scratch, p, next); break;
    case 64: rows_at<8>(rows, n, shared, scale, scratch, p, next); break;
    case 96: rows_at<12>(rows, n, shared, scale, scratch, p, next); break;
    default: rows_at<16>(rows, n, shared, scale, scratch, p, next); break;
  }
}

}  // namespace

void attention_rows(const AttentionRow<float>* rows, int64_t n, int64_t shared, int64_t D, float scale,
                    float* scratch, float** scores, const AttentionRow<float>* next) {
  rows_of(rows, n, shared, D, scale, scratch, scores, next);
}

void attention_rows(const AttentionRow<uint16_t>* rows, int64_t n, int64_t shared, int64_t D, float scale,
                    float* scratch, float** scores, const AttentionRow<uint16_t>* next) {
  rows_of(rows, n, shared, D, scale, scratch, scores, next);
}

void silu_mul(const float* gate, const float* up, int64_t count, float* y) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < count; i += 16) {
    // The last partial vector goes through the same instructions, masked.
    const __mmask16 m = first_lanes(count - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, Sleef_finz_expf16_u10avx512f(_mm512_sub_ps(zero, g))));
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(s, u));
  }
}

}  // namespace splitspec::kernels::avx512

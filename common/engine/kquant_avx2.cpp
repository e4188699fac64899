// The K-quant row products (kquant.h's kquant_dots) with AVX2: the same
// integers, and the same float operations in the same order per output, as
// the reference, so the same bits. Built with -mavx2 -mfma -mf16c and called
// only after linear.cpp's check for them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "common/engine/kquant.h"
#include "common/engine/linear_isa.h"

namespace splitspec::kernels::avx2 {

namespace {

// Q4_K's and Q5_K's twelve bytes of scales and mins as eight 6-bit scales
// (bytes of sc) and eight 6-bit mins (bytes of m), four at a time.
void scales_mins(const uint8_t* s, uint8_t sc[8], uint8_t m[8]) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x03030303;
  const uint32_t v[4] = {u[0] & low6, (u[2] & low4) | (((u[0] >> 6) & top2) << 4), u[1] & low6,
                         ((u[2] >> 4) & low4) | (((u[1] >> 6) & top2) << 4)};
  std::memcpy(sc, v, 8);
  std::memcpy(m, v + 2, 8);
}

// One super-block, decoded a vector at a time: vector v holds weights
// 32v .. 32v + 31 as unsigned quants (Q6_K's plus 32), and its scales as
// 16-bit lanes, each lane the scale of its weight pair.
template <WType T>
struct Block {
  const uint8_t* b;
  __m256i scales16;  // Q4_K/Q5_K: the eight scales, in both halves; Q6_K: the sixteen
  __m256i mins16;    // Q4_K/Q5_K: the eight mins, in both halves

  explicit Block(const uint8_t* block) : b(block) {
    if constexpr (T == WType::Q6_K) {
      scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    } else {
      uint8_t sc[8], m[8];
      scales_mins(b + 4, sc, m);
      scales16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
      mins16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m))));
    }
  }

  template <int V>
  __m256i quants() const {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    if constexpr (T == WType::Q6_K) {
      // Vector 4h + k: low nibbles (k < 2) or high nibbles of ql's 32 bytes at
      // 64h + 32(k & 1), with bits 2k, 2k + 1 of qh's 32 bytes at 32h on top.
      constexpr int h = V / 4, k = V % 4;
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h + 32 * (k & 1)));
      const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
      const __m256i nib = k < 2 ? _mm256_and_si256(lo, low4) : _mm256_and_si256(_mm256_srli_epi16(lo, 4), low4);
      return _mm256_or_si256(nib, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 2 * k), _mm256_set1_epi8(3)), 4));
    } else {
      // Vector 2j (low nibbles) and 2j + 1 (high) of qs's 32 bytes at 32j; for
      // Q5_K, bit V of qh's bytes on top.
      constexpr bool five = T == WType::Q5_K;
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + (five ? 48 : 16) + 32 * (V / 2)));
      __m256i q = V % 2 == 0 ? _mm256_and_si256(bytes, low4) : _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      if constexpr (five) {
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
        q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, V), _mm256_set1_epi8(1)), 4));
      }
      return q;
    }
  }

  template <int V>
  __m256i scales() const {
    if constexpr (T == WType::Q6_K) {
      // Sub-blocks 2V (first 16 lanes) and 2V + 1: dword V of the sixteen.
      const __m256i pair = _mm256_permutevar8x32_epi32(scales16, _mm256_set1_epi32(V));
      return _mm256_shuffle_epi8(pair, _mm256_set_epi8(3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 1, 0, 1, 0, 1, 0, 1,
                                                       0, 1, 0, 1, 0, 1, 0, 1, 0));
    } else {
      return _mm256_shuffle_epi8(scales16, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * V)));
    }
  }
};

// 32 unsigned quants times 32 inputs, each pair of products summed (at most
// 63 * 127 * 2: no int16 saturation), then times the pairs' scales and summed
// in pairs again into 8 int32 lanes.
__m256i scaled(__m256i q, const int8_t* x, __m256i scales16) {
  const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  return _mm256_madd_epi16(p, scales16);
}

// Lane r: the sum of v[r]'s eight lanes (integer adds: exact in any order).
__m256i sum_each(const __m256i v[8]) {
  const __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

// Lane r: the sum of v[r]'s four lanes.
__m256i sum_each(const __m128i v[8]) {
  const __m128i lo = _mm_hadd_epi32(_mm_hadd_epi32(v[0], v[1]), _mm_hadd_epi32(v[2], v[3]));
  const __m128i hi = _mm_hadd_epi32(_mm_hadd_epi32(v[4], v[5]), _mm_hadd_epi32(v[6], v[7]));
  return _mm256_set_m128i(hi, lo);
}

// The half-precision values at `p`, `p + step`, ... (eight of them).
__m256 halves(const uint8_t* p, int64_t step, int lanes) {
  uint16_t h[8] = {};
  for (int r = 0; r < lanes; ++r) std::memcpy(&h[r], p + r * step, 2);
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

template <WType T, int N, int V>
void add_vector(const Block<T>& blk, const int8_t* const* xq, __m256i* a) {
  const __m256i q = blk.template quants<V>(), s = blk.template scales<V>();
  for (int i = 0; i < N; ++i) a[i] = _mm256_add_epi32(a[i], scaled(q, xq[i] + 32 * V, s));
}

// `lanes` (1..8) weight rows, `rb` bytes apart, times N activation rows from
// j0: lane r of the result is row r's kquant_dots output. A lane's float
// operations are the reference's (fused multiply-adds lane-wise, in the same
// order), so its bits are too; its integers are the same integers.
template <WType T, int N>
void rows8(const uint8_t* row0, int64_t rb, int lanes, int64_t cols, const Q8KRows& x, int64_t j0, float* out,
           int64_t stride) {
  constexpr int64_t sb = superblock_bytes(T);
  const int64_t nb = cols / kSuperBlock;
  __m256 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* xq[N];
    __m256i sums16[N];
    __m128i pairs[N];
    for (int i = 0; i < N; ++i) {
      xq[i] = x.q.data() + (j0 + i) * x.cols + b * kSuperBlock;
      sums16[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums.data() + ((j0 + i) * nb + b) * 16));
      // Each Q4_K/Q5_K min covers two 16-sums.
      pairs[i] = _mm_hadd_epi16(_mm256_castsi256_si128(sums16[i]), _mm256_extracti128_si256(sums16[i], 1));
    }
    __m256i sums[N][8];
    __m128i mins[N][8];
    for (int r = 0; r < 8; ++r) {
      if (r >= lanes) {
        for (int i = 0; i < N; ++i) {
          sums[i][r] = _mm256_setzero_si256();
          mins[i][r] = _mm_setzero_si128();
        }
        continue;
      }
      const uint8_t* block = row0 + r * rb + b * sb;
      prefetch_ahead(block, sb);
      const Block<T> blk(block);
      __m256i a[N];
      for (int i = 0; i < N; ++i) a[i] = _mm256_setzero_si256();
      add_vector<T, N, 0>(blk, xq, a);
      add_vector<T, N, 1>(blk, xq, a);
      add_vector<T, N, 2>(blk, xq, a);
      add_vector<T, N, 3>(blk, xq, a);
      add_vector<T, N, 4>(blk, xq, a);
      add_vector<T, N, 5>(blk, xq, a);
      add_vector<T, N, 6>(blk, xq, a);
      add_vector<T, N, 7>(blk, xq, a);
      for (int i = 0; i < N; ++i) {
        // Q6_K's stored quants are the weights plus 32: less 32 x scale x the 16-sums.
        if constexpr (T == WType::Q6_K)
          a[i] = _mm256_sub_epi32(a[i], _mm256_slli_epi32(_mm256_madd_epi16(blk.scales16, sums16[i]), 5));
        else
          mins[i][r] = _mm_madd_epi16(_mm256_castsi256_si128(blk.mins16), pairs[i]);
        sums[i][r] = a[i];
      }
    }
    const uint8_t* first = row0 + b * sb;
    const __m256 d = halves(T == WType::Q6_K ? first + 208 : first, rb, lanes);
    for (int i = 0; i < N; ++i) {
      const __m256 xd = _mm256_set1_ps(x.d[(j0 + i) * nb + b]);
      acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(d, xd), _mm256_cvtepi32_ps(sum_each(sums[i])), acc[i]);
    }
    if constexpr (T != WType::Q6_K) {
      const __m256 dmin = halves(first + 2, rb, lanes);
      for (int i = 0; i < N; ++i) {
        const __m256 xd = _mm256_set1_ps(x.d[(j0 + i) * nb + b]);
        acc[i] = _mm256_fmadd_ps(_mm256_xor_ps(_mm256_mul_ps(dmin, xd), _mm256_set1_ps(-0.0f)),
                                 _mm256_cvtepi32_ps(sum_each(mins[i])), acc[i]);
      }
    }
  }
  for (int i = 0; i < N; ++i) {
    alignas(32) float v[8];
    _mm256_store_ps(v, acc[i]);
    for (int r = 0; r < lanes; ++r) out[i * stride + r] = v[r];
  }
}

template <WType T, int N>
void block_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, int64_t j0, float* y) {
  const int64_t rb = row_bytes(T, w.cols);
  for (int64_t r = r0; r < r1; r += 8)
    rows8<T, N>(w.row(r), rb, static_cast<int>(std::min<int64_t>(8, r1 - r)), w.cols, x, j0, y + j0 * w.rows + r,
                w.rows);
}

template <WType T>
void typed_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y) {
  static_assert(kMaxDotRows == 8);
  for (int64_t j = 0; j < x.rows; j += kMaxDotRows) {
    switch (std::min<int64_t>(kMaxDotRows, x.rows - j)) {
      case 1: block_rows<T, 1>(w, r0, r1, x, j, y); break;
      case 2: block_rows<T, 2>(w, r0, r1, x, j, y); break;
      case 3: block_rows<T, 3>(w, r0, r1, x, j, y); break;
      case 4: block_rows<T, 4>(w, r0, r1, x, j, y); break;
      case 5: block_rows<T, 5>(w, r0, r1, x, j, y); break;
      case 6: block_rows<T, 6>(w, r0, r1, x, j, y); break;
      case 7: block_rows<T, 7>(w, r0, r1, x, j, y); break;
      default: block_rows<T, 8>(w, r0, r1, x, j, y); break;
    }
  }
}

}  // namespace

void kquant_rows(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y) {
  switch (w.type) {
    case WType::Q4_K: return typed_rows<WType::Q4_K>(w, r0, r1, x, y);
    case WType::Q5_K: return typed_rows<WType::Q5_K>(w, r0, r1, x, y);
    default: return typed_rows<WType::Q6_K>(w, r0, r1, x, y);
  }
}

}  // namespace splitspec::kernels::avx2

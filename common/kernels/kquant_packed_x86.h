#pragma once
// The skeleton of the packed Q4_K and Q6_K bodies (kquant_packed_avx2.cpp,
// kquant_packed_avx512.cpp), included by each and so built with each body's
// flags. Packed weights (kquant.h) hold one weight row per 32-bit lane, so a
// super-block's integer sums land in their rows' lanes with no horizontal
// adds, and each sub-block's scale multiplies eight rows at once. A body
// supplies only the integer products (Products below); the decoding, the
// mins, Q6_K's offset and the float operations are here, once, lane-wise
// kquant_dots' in its order: the integers are the reference's, so the bits
// are too. Internal to those two files.
//
// A Products type P has:
//   step(part, q, x): part plus each lane's four quant bytes q (unsigned)
//     times the four activation bytes x (signed), in P's partial form;
//   q4k_apply, q6k_apply(isum, part, s): isum (int32 lanes) plus part
//     times scale s;
//   q4k_scale(u, b): byte b (0..3) of each lane of u as q4k_apply's scale;
//   q6k_scale(p): the eight signed bytes at p, one a lane, as q6k_apply's
//     scale;
//   q4k_run, q6k_run: how many steps one part takes before it is applied
//     (a part that is kept, or applied, as 16 bits holds fewer steps than
//     one of 32).
#include <immintrin.h>

#include <cstring>

#include "common/kernels/kquant.h"
#include "common/kernels/linear_isa.h"

namespace splitspec::kernels {
namespace {

__m256i load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Four activation bytes in every lane, straight from memory: a broadcast
// load takes no shuffle port, which the products need.
__m256i four(const int8_t* x) { return _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(x))); }

// Bytes b and b + 1 (b even) of each lane as its two 16-bit halves.
__m256i bytes_two(__m256i v, int b) {
  const char i = static_cast<char>(b), z = static_cast<char>(0x80);
  return _mm256_shuffle_epi8(v, _mm256_setr_epi8(i, z, i + 1, z, i + 4, z, i + 5, z, i + 8, z, i + 9, z, i + 12, z, i + 13, z,
                                                 i, z, i + 1, z, i + 4, z, i + 5, z, i + 8, z, i + 9, z, i + 12, z, i + 13, z));
}

// Lane r of acc[i] to out[i * stride + r].
void store_lanes(const __m256* acc, int R, float* out, int64_t stride) {
  for (int i = 0; i < R; ++i) _mm256_storeu_ps(out + i * stride, acc[i]);
}

// Keeps a sum's additions in program order: GCC otherwise re-associates
// them into a tree whose products, all live at once, spill to the stack.
inline void in_order(__m256i& v) { asm("" : "+x"(v)); }

__m256 halves8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// One group of eight Q4_K rows times activation rows j0 .. j0 + R - 1.
template <class P, int R>
void q4k_group(const uint8_t* g, int64_t nb, const Q8KRows& x, int64_t j0, float* out, int64_t stride) {
  static_assert(8 % P::q4k_run == 0);
  constexpr int64_t bb = kKPackRows * 144;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i low6 = _mm256_set1_epi32(0x3f3f3f3f), nib = _mm256_set1_epi32(0x0f0f0f0f), top2 = _mm256_set1_epi32(0x03030303);
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = g + b * bb;
    prefetch_ahead(p, bb);
    // Each lane's twelve scale bytes as 32-bit words u0, u1, u2: scales 0-3
    // and 4-7 (sa, sb), mins 0-3 and 4-7 (ma, mb), a byte each.
    const __m256i u0 = load(p + 32), u1 = load(p + 64), u2 = load(p + 96);
    const __m256i sa = _mm256_and_si256(u0, low6);
    const __m256i sb = _mm256_or_si256(_mm256_and_si256(u2, nib), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 6), top2), 4));
    const __m256i ma = _mm256_and_si256(u1, low6);
    const __m256i mb = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), nib),
                                       _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 6), top2), 4));
    const int8_t* xq[R];
    for (int i = 0; i < R; ++i) xq[i] = x.q.data() + (j0 + i) * x.cols + b * kSuperBlock;
    __m256i isum[R];
    for (int i = 0; i < R; ++i) isum[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {  // sub-block j: low (j even) or high nibbles of quant vectors 8(j / 2) + k
      const __m256i s = P::q4k_scale(j < 4 ? sa : sb, j % 4);
#pragma GCC unroll 8
      for (int k0 = 0; k0 < 8; k0 += P::q4k_run) {
        __m256i part[R];
        for (int i = 0; i < R; ++i) part[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int k = k0; k < k0 + P::q4k_run; ++k) {
          const __m256i raw = load(p + 128 + 32 * (8 * (j / 2) + k));
          const __m256i q = j % 2 == 0 ? _mm256_and_si256(raw, low4) : _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
          for (int i = 0; i < R; ++i) {
            part[i] = P::step(part[i], q, four(xq[i] + 32 * j + 4 * k));
            in_order(part[i]);
          }
        }
        for (int i = 0; i < R; ++i) isum[i] = P::q4k_apply(isum[i], part[i], s);
      }
    }
    const __m256i m01 = bytes_two(ma, 0), m23 = bytes_two(ma, 2), m45 = bytes_two(mb, 0), m67 = bytes_two(mb, 2);
    const __m256 d = halves8(p), dmin = halves8(p + 16);
    for (int i = 0; i < R; ++i) {
      const int64_t at = (j0 + i) * nb + b;
      // The activations' sums per 32: pairs of their 16-sums.
      const __m256i s16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums.data() + at * 16));
      const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(s16), _mm256_extracti128_si256(s16, 1));
      __m256i mins = _mm256_madd_epi16(m01, _mm256_set1_epi32(_mm_extract_epi32(pairs, 0)));
      mins = _mm256_add_epi32(mins, _mm256_madd_epi16(m23, _mm256_set1_epi32(_mm_extract_epi32(pairs, 1))));
      mins = _mm256_add_epi32(mins, _mm256_madd_epi16(m45, _mm256_set1_epi32(_mm_extract_epi32(pairs, 2))));
      mins = _mm256_add_epi32(mins, _mm256_madd_epi16(m67, _mm256_set1_epi32(_mm_extract_epi32(pairs, 3))));
      const __m256 xd = _mm256_set1_ps(x.d[at]);
      acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(d, xd), _mm256_cvtepi32_ps(isum[i]), acc[i]);
      acc[i] = _mm256_fmadd_ps(_mm256_xor_ps(_mm256_mul_ps(dmin, xd), _mm256_set1_ps(-0.0f)), _mm256_cvtepi32_ps(mins), acc[i]);
    }
  }
  store_lanes(acc, R, out, stride);
}

// One group of eight Q6_K rows times activation rows j0 .. j0 + R - 1, the
// quants as stored (the weights plus 32), less 32 x the scales times the
// activations' 16-sums at the end.
template <class P, int R>
void q6k_group(const uint8_t* g, int64_t nb, const Q8KRows& x, int64_t j0, float* out, int64_t stride) {
  static_assert(4 % P::q6k_run == 0);
  constexpr int64_t bb = kKPackRows * 210;
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  const __m128i pairs = _mm_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = g + b * bb;
    prefetch_ahead(p, bb);
    const int8_t* xq[R];
    for (int i = 0; i < R; ++i) xq[i] = x.q.data() + (j0 + i) * x.cols + b * kSuperBlock;
    __m256i sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = P::q6k_scale(p + 16 + 8 * j);
    __m256i isum[R];
    for (int i = 0; i < R; ++i) isum[i] = _mm256_setzero_si256();
    // Quant vector Q (0..3) of step k (0..7) in half h: weights 128h + 32Q +
    // 4k .. (sub-block 8h + 2Q + k / 4), the low (Q < 2) or high nibbles of
    // ql's vector 16h + k (Q even) or 16h + k + 8 (Q odd), with bits 2Q and
    // 2Q + 1 of qh's vector 8h + k on top.
    auto quants = [&](int h, int Q, int k) {
      const uint8_t* ql = p + 656 + 32 * (16 * h + k + (Q % 2 == 1 ? 8 : 0));
      const __m256i qh = load(p + 144 + 32 * (8 * h + k)), raw = load(ql);
      const __m256i nib = Q < 2 ? _mm256_and_si256(raw, low4) : _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      const __m256i top = Q == 0 ? _mm256_slli_epi16(qh, 4) : Q == 1 ? _mm256_slli_epi16(qh, 2) : Q == 2 ? qh : _mm256_srli_epi16(qh, 2);
      return _mm256_or_si256(nib, _mm256_and_si256(top, bits45));
    };
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
      for (int Q = 0; Q < 4; ++Q)
#pragma GCC unroll 8
        for (int k0 = 0; k0 < 8; k0 += P::q6k_run) {
          const __m256i& s = sc[8 * h + 2 * Q + k0 / 4];
          __m256i q[P::q6k_run];
          for (int k = 0; k < P::q6k_run; ++k) q[k] = quants(h, Q, k0 + k);
          const int64_t at = 128 * h + 32 * Q + 4 * k0;
          // Row by row, so only one part is live.
          for (int i = 0; i < R; ++i) {
            __m256i part = _mm256_setzero_si256();
            for (int k = 0; k < P::q6k_run; ++k) part = P::step(part, q[k], four(xq[i] + at + 4 * k));
            isum[i] = P::q6k_apply(isum[i], part, s);
            in_order(isum[i]);
          }
        }
    // Scales 2m and 2m + 1 of each row as its lane's halves, against the
    // activations' 16-sums 2m and 2m + 1.
    __m256i sp[8];
    for (int m = 0; m < 8; ++m)
      sp[m] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 + 16 * m)), pairs));
    const __m256 d = halves8(p);
    for (int i = 0; i < R; ++i) {
      const int64_t at = (j0 + i) * nb + b;
      const int16_t* s16 = x.bsums.data() + at * 16;
      __m256i off = _mm256_setzero_si256();
      for (int m = 0; m < 8; ++m) {
        int32_t two;
        std::memcpy(&two, s16 + 2 * m, 4);
        off = _mm256_add_epi32(off, _mm256_madd_epi16(sp[m], _mm256_set1_epi32(two)));
      }
      const __m256i sum = _mm256_sub_epi32(isum[i], _mm256_slli_epi32(off, 5));
      acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x.d[at])), _mm256_cvtepi32_ps(sum), acc[i]);
    }
  }
  store_lanes(acc, R, out, stride);
}

template <class P, int R>
void group(WType t, const uint8_t* g, int64_t nb, const Q8KRows& x, int64_t j0, float* out, int64_t stride) {
  if (t == WType::Q4_K)
    q4k_group<P, R>(g, nb, x, j0, out, stride);
  else
    q6k_group<P, R>(g, nb, x, j0, out, stride);
}

// Rows [r0, r1) of packed `w` (whole groups) times every row of `x`.
template <class P>
void kquant_packed_rows_with(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y) {
  const int64_t nb = w.cols / kSuperBlock;
  // Up to eight activation rows share each decoded quant vector: with the
  // inputs broadcast from memory, eight rows' partial sums fit the
  // registers, and a verification of 5-8 tokens decodes each super-block
  // once.
  constexpr int most = 8;
  for (int64_t r = r0; r < r1; r += kKPackRows) {
    const uint8_t* g = w.row(r);
    // Passes as even as they can be: one wider pass costs less than a
    // narrow one, which pays the decoding for few rows.
    const int64_t passes = (x.rows + most - 1) / most;
    for (int64_t j = 0, pass = 0; j < x.rows; ++pass) {
      const int R = static_cast<int>((x.rows - j) / (passes - pass) + ((x.rows - j) % (passes - pass) != 0));
      float* out = y + j * w.rows + r;
      switch (R) {
        case 1: group<P, 1>(w.type, g, nb, x, j, out, w.rows); break;
        case 2: group<P, 2>(w.type, g, nb, x, j, out, w.rows); break;
        case 3: group<P, 3>(w.type, g, nb, x, j, out, w.rows); break;
        case 4: group<P, 4>(w.type, g, nb, x, j, out, w.rows); break;
        case 5: group<P, 5>(w.type, g, nb, x, j, out, w.rows); break;
        case 6: group<P, 6>(w.type, g, nb, x, j, out, w.rows); break;
        case 7: group<P, 7>(w.type, g, nb, x, j, out, w.rows); break;
        default: group<P, 8>(w.type, g, nb, x, j, out, w.rows); break;
      }
      j += R;
    }
  }
}

}  // namespace
}  // namespace splitspec::kernels

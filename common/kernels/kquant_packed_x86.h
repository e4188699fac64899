#pragma once
// The skeleton of the packed Q4_K and Q6_K bodies (kquant_packed_avx2.cpp,
// kquant_packed_avx512.cpp), included by each and so built with each body's
// flags. Packed weights (kquant.h) hold one weight row per 32-bit lane, so a
// super-block's integer sums land in their rows' lanes with no horizontal
// adds, and each sub-block's scale multiplies eight rows at once (a whole
// group of sixteen in 512-bit vectors). A body supplies its vectors
// and integer products (P below); the decoding, the mins, Q6_K's offset and
// the float operations are here, once, lane-wise kquant_dots' in its order:
// the integers are the reference's, so the bits are too, at any width.
// Internal to those two files.
//
// A body type P has:
//   the vectors it works in, as Lanes8 below provides them (I: integer
//   lanes, F: float lanes, each lane one weight row; kRows: how many rows
//   of a group one vector spans, 8 or 16: a 256-bit body passes over a
//   group's two sides, rows 0-7 then 8-15, and the skeleton finds each
//   side's bytes, kquant.h);
//   step(part, q, x): part plus each lane's four quant bytes q (unsigned)
//     times the four activation bytes at x (signed), in P's partial form;
//   q4k_apply, q6k_apply(isum, part, s): isum (int32 lanes) plus part
//     times scale s;
//   q4k_scale(u, b): byte b (0..3) of each lane of u as q4k_apply's scale;
//   q6k_scale(p): the kRows signed bytes at p, one a lane, as q6k_apply's
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

// Eight rows of a group in 256-bit vectors.
struct Lanes8 {
  using I = __m256i;
  using F = __m256;
  static constexpr int kRows = 8;
  static I load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static F halves(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  // The eight signed bytes at a and the eight at b, reordered within by
  // `order`, as 16 bits each.
  static I bytes16(const uint8_t* a, const uint8_t* b, __m128i order) {
    const __m128i v = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                                         _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(v, order));
  }
  // Four activation bytes in every lane, straight from memory: a broadcast
  // load takes no shuffle port, which the products need.
  static I four(const int8_t* x) { return _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(x))); }
  static I shuffle(I v, __m128i order) { return _mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(order)); }
  static I zero() { return _mm256_setzero_si256(); }
  static I set8(char c) { return _mm256_set1_epi8(c); }
  static I set32(int32_t v) { return _mm256_set1_epi32(v); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub32(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I madd16(I a, I b) { return _mm256_madd_epi16(a, b); }
  static I srli16(I v, int n) { return _mm256_srli_epi16(v, n); }
  static I slli16(I v, int n) { return _mm256_slli_epi16(v, n); }
  static I srli32(I v, int n) { return _mm256_srli_epi32(v, n); }
  static I slli32(I v, int n) { return _mm256_slli_epi32(v, n); }
  static F fzero() { return _mm256_setzero_ps(); }
  static F fset(float v) { return _mm256_set1_ps(v); }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F neg(F v) { return _mm256_xor_ps(v, _mm256_set1_ps(-0.0f)); }
  static void store(float* out, F v) { _mm256_storeu_ps(out, v); }
};

// Keeps a sum's additions in program order: GCC otherwise re-associates
// them into a tree whose products, all live at once, spill to the stack.
template <class I>
inline void in_order(I& v) { asm("" : "+v"(v)); }

// Bytes b and b + 1 (b even) of each lane as its two 16-bit halves.
template <class P>
typename P::I bytes_two(typename P::I v, int b) {
  const char i = static_cast<char>(b), z = static_cast<char>(0x80);
  return P::shuffle(v, _mm_setr_epi8(i, z, i + 1, z, i + 4, z, i + 5, z, i + 8, z, i + 9, z, i + 12, z, i + 13, z));
}

// The activations' four sums of 32 (pairs of their 16-sums) for block `at`.
inline __m128i sums32(const Q8KRows& x, int64_t at) {
  const __m256i s16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums.data() + at * 16));
  return _mm_hadd_epi16(_mm256_castsi256_si128(s16), _mm256_extracti128_si256(s16, 1));
}

// Where a group's fields lie (kquant.h), for G = kKPackRows rows: a piece
// (every row's next four bytes) is 4G bytes; `side` (0 or 1) is which rows
// a 256-bit body's vectors hold, 8 x side on, so it reads 32 x side bytes
// into each piece, 16 x side into the d's, 8 x side into a scale row.
constexpr int64_t kPiece = 4 * kKPackRows;

// P::kRows Q4_K rows of the group at g, from row P::kRows x side, times
// activation rows j0 .. j0 + R - 1.
template <class P, int R>
void q4k_group(const uint8_t* g, int64_t nb, int side, const Q8KRows& x, int64_t j0, float* out, int64_t stride) {
  static_assert(8 % P::q4k_run == 0);
  using I = typename P::I;
  using F = typename P::F;
  constexpr int64_t bb = kKPackRows * 144;
  const int64_t s4 = 32 * side, s2 = 16 * side;
  const I low4 = P::set8(0x0F);
  const I low6 = P::set32(0x3f3f3f3f), nib = P::set32(0x0f0f0f0f), top2 = P::set32(0x03030303);
  F acc[R];
  for (int i = 0; i < R; ++i) acc[i] = P::fzero();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = g + b * bb;
    // The second side finds the bytes the first asked for.
    if (side == 0) prefetch_ahead(p, bb);
    // Each lane's twelve scale bytes as 32-bit words u0, u1, u2: scales 0-3
    // and 4-7 (sa, sb), mins 0-3 and 4-7 (ma, mb), a byte each.
    const uint8_t* u = p + kq4_scales + s4;
    const I u0 = P::load(u), u1 = P::load(u + kPiece), u2 = P::load(u + 2 * kPiece);
    const I sa = P::and_(u0, low6);
    const I sb = P::or_(P::and_(u2, nib), P::slli32(P::and_(P::srli32(u0, 6), top2), 4));
    const I ma = P::and_(u1, low6);
    const I mb = P::or_(P::and_(P::srli32(u2, 4), nib), P::slli32(P::and_(P::srli32(u1, 6), top2), 4));
    const int8_t* xq[R];
    for (int i = 0; i < R; ++i) xq[i] = x.q.data() + (j0 + i) * x.cols + b * kSuperBlock;
    I isum[R];
    for (int i = 0; i < R; ++i) isum[i] = P::zero();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {  // sub-block j: low (j even) or high nibbles of quant vectors 8(j / 2) + k
      const I s = P::q4k_scale(j < 4 ? sa : sb, j % 4);
#pragma GCC unroll 8
      for (int k0 = 0; k0 < 8; k0 += P::q4k_run) {
        I part[R];
        for (int i = 0; i < R; ++i) part[i] = P::zero();
#pragma GCC unroll 8
        for (int k = k0; k < k0 + P::q4k_run; ++k) {
          const I raw = P::load(p + kq4_quants + kPiece * (8 * (j / 2) + k) + s4);
          const I q = j % 2 == 0 ? P::and_(raw, low4) : P::and_(P::srli16(raw, 4), low4);
          for (int i = 0; i < R; ++i) {
            part[i] = P::step(part[i], q, xq[i] + 32 * j + 4 * k);
            in_order(part[i]);
          }
        }
        for (int i = 0; i < R; ++i) isum[i] = P::q4k_apply(isum[i], part[i], s);
      }
    }
    const I m01 = bytes_two<P>(ma, 0), m23 = bytes_two<P>(ma, 2), m45 = bytes_two<P>(mb, 0), m67 = bytes_two<P>(mb, 2);
    const F d = P::halves(p + s2), dmin = P::halves(p + kq4_dmin + s2);
    for (int i = 0; i < R; ++i) {
      const int64_t at = (j0 + i) * nb + b;
      const __m128i pairs = sums32(x, at);
      I mins = P::madd16(m01, P::set32(_mm_extract_epi32(pairs, 0)));
      mins = P::add32(mins, P::madd16(m23, P::set32(_mm_extract_epi32(pairs, 1))));
      mins = P::add32(mins, P::madd16(m45, P::set32(_mm_extract_epi32(pairs, 2))));
      mins = P::add32(mins, P::madd16(m67, P::set32(_mm_extract_epi32(pairs, 3))));
      const F xd = P::fset(x.d[at]);
      acc[i] = P::fmadd(P::mul(d, xd), P::cvt(isum[i]), acc[i]);
      acc[i] = P::fmadd(P::neg(P::mul(dmin, xd)), P::cvt(mins), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) P::store(out + i * stride, acc[i]);
}

// P::kRows Q6_K rows of the group at g, from row P::kRows x side, times
// activation rows j0 .. j0 + R - 1, the quants as stored (the weights plus
// 32), less 32 x the scales times the activations' 16-sums. A part that
// spans a whole sub-block (q6k_run 4, 32 bits) starts from that sub-block's
// -32 x 16-sum, a broadcast load, where zeroing it took an instruction
// anyway; narrower parts take the offset at the end.
template <class P, int R>
void q6k_group(const uint8_t* g, int64_t nb, int side, const Q8KRows& x, int64_t j0, float* out, int64_t stride) {
  static_assert(4 % P::q6k_run == 0);
  constexpr bool whole = P::q6k_run == 4;
  using I = typename P::I;
  using F = typename P::F;
  constexpr int64_t G = kKPackRows, bb = G * 210;
  const int64_t s4 = 32 * side, s2 = 16 * side, s1 = 8 * side;
  const I low4 = P::set8(0x0F), bits45 = P::set8(0x30);
  F acc[R];
  for (int i = 0; i < R; ++i) acc[i] = P::fzero();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = g + b * bb;
    if (side == 0) prefetch_ahead(p, bb);
    // The super-block's fields (kquant.h): the quants, and sub-block j's
    // scales.
    const uint8_t* qs = p + kq6_quants(b) + s4;
    const uint8_t* rest = p + kq6_rest(b);
    auto scales = [&](int j) { return rest + G * j + s1; };
    const int8_t* xq[R];
    for (int i = 0; i < R; ++i) xq[i] = x.q.data() + (j0 + i) * x.cols + b * kSuperBlock;
    const int32_t* start[R];
    for (int i = 0; i < R; ++i) start[i] = x.q6k_starts.data() + ((j0 + i) * nb + b) * 16;
    I isum[R];
    for (int i = 0; i < R; ++i) isum[i] = P::zero();
    // Quant vector Q (0..3) of step k (0..7) in half h: weights 128h + 32Q +
    // 4k .. (sub-block 8h + 2Q + k / 4), the low (Q < 2) or high nibbles of
    // ql's vector 16h + k (Q even) or 16h + k + 8 (Q odd), with bits 2Q and
    // 2Q + 1 of qh's vector 8h + k on top.
    auto quants = [&](int h, int Q, int k) {
      const uint8_t* ql = qs + kPiece * (16 * h + k + (Q % 2 == 1 ? 8 : 0));
      const I qh = P::load(qs + kq6_qh + kPiece * (8 * h + k)), raw = P::load(ql);
      const I nib = Q < 2 ? P::and_(raw, low4) : P::and_(P::srli16(raw, 4), low4);
      const I top = Q == 0 ? P::slli16(qh, 4) : Q == 1 ? P::slli16(qh, 2) : Q == 2 ? qh : P::srli16(qh, 2);
      return P::or_(nib, P::and_(top, bits45));
    };
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
      for (int Q = 0; Q < 4; ++Q)
#pragma GCC unroll 8
        for (int k0 = 0; k0 < 8; k0 += P::q6k_run) {
          const int j = 8 * h + 2 * Q + k0 / 4;
          const int64_t at = 128 * h + 32 * Q + 4 * k0;
          // Rows inside steps, so neighbouring products are independent.
          // Row by row (one part live, as first written), the 512-bit
          // 5-row product ran at about half the rate its instructions
          // allow, each row's four dependent products in a row the likely
          // cause (k_token.md, "Q6_K's parts side by side").
          I part[R];
          for (int i = 0; i < R; ++i) {
            part[i] = P::zero();
            if constexpr (whole) part[i] = P::broadcast(start[i] + j);
          }
          for (int k = 0; k < P::q6k_run; ++k) {
            const I q = quants(h, Q, k0 + k);
            for (int i = 0; i < R; ++i) {
              part[i] = P::step(part[i], q, xq[i] + at + 4 * k);
              in_order(part[i]);
            }
          }
          const I s = P::q6k_scale(scales(j));
          for (int i = 0; i < R; ++i) {
            isum[i] = P::q6k_apply(isum[i], part[i], s);
            in_order(isum[i]);
          }
        }
    if constexpr (!whole) {
      // Scales 2m and 2m + 1 of each row as its lane's halves, against the
      // activations' 16-sums 2m and 2m + 1.
      const __m128i pairs = _mm_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
      I sp[8];
      for (int m = 0; m < 8; ++m) sp[m] = P::bytes16(scales(2 * m), scales(2 * m + 1), pairs);
      for (int i = 0; i < R; ++i) {
        const int16_t* s16 = x.bsums.data() + ((j0 + i) * nb + b) * 16;
        I off = P::zero();
        for (int m = 0; m < 8; ++m) {
          int32_t two;
          std::memcpy(&two, s16 + 2 * m, 4);
          off = P::add32(off, P::madd16(sp[m], P::set32(two)));
        }
        isum[i] = P::sub32(isum[i], P::slli32(off, 5));
      }
    }
    const F d = P::halves(rest + kq6_d + s2);
    for (int i = 0; i < R; ++i)
      acc[i] = P::fmadd(P::mul(d, P::fset(x.d[(j0 + i) * nb + b])), P::cvt(isum[i]), acc[i]);
  }
  for (int i = 0; i < R; ++i) P::store(out + i * stride, acc[i]);
}

template <class P, int R>
void group(WType t, const uint8_t* g, int64_t nb, int side, const Q8KRows& x, int64_t j0, float* out,
           int64_t stride) {
  if (t == WType::Q4_K)
    q4k_group<P, R>(g, nb, side, x, j0, out, stride);
  else
    q6k_group<P, R>(g, nb, side, x, j0, out, stride);
}

// Every row of `x` times the group of packed `w` at row r, P::kRows rows a
// pass.
template <class P>
void group_times(const MatrixRef& w, int64_t r, const Q8KRows& x, float* y) {
  const int64_t nb = w.cols / kSuperBlock;
  // Up to eight activation rows share each decoded quant vector: with the
  // inputs broadcast from memory, eight rows' partial sums fit the
  // registers, and a verification of 5-8 tokens decodes each super-block
  // once.
  constexpr int most = 8;
  const uint8_t* g = w.row(r);
  // Passes as even as they can be: one wider pass costs less than a narrow
  // one, which pays the decoding for few rows.
  const int64_t passes = (x.rows + most - 1) / most;
  for (int side = 0; side < kKPackRows / P::kRows; ++side)
    for (int64_t j = 0, pass = 0; j < x.rows; ++pass) {
      const int R = static_cast<int>((x.rows - j) / (passes - pass) + ((x.rows - j) % (passes - pass) != 0));
      float* out = y + j * w.rows + r + P::kRows * side;
      switch (R) {
        case 1: group<P, 1>(w.type, g, nb, side, x, j, out, w.rows); break;
        case 2: group<P, 2>(w.type, g, nb, side, x, j, out, w.rows); break;
        case 3: group<P, 3>(w.type, g, nb, side, x, j, out, w.rows); break;
        case 4: group<P, 4>(w.type, g, nb, side, x, j, out, w.rows); break;
        case 5: group<P, 5>(w.type, g, nb, side, x, j, out, w.rows); break;
        case 6: group<P, 6>(w.type, g, nb, side, x, j, out, w.rows); break;
        case 7: group<P, 7>(w.type, g, nb, side, x, j, out, w.rows); break;
        default: group<P, 8>(w.type, g, nb, side, x, j, out, w.rows); break;
      }
      j += R;
    }
}

// Rows [r0, r1) of packed `w` (whole groups) times every row of `x`.
template <class P>
void kquant_packed_rows_with(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& x, float* y) {
  for (int64_t r = r0; r < r1; r += kKPackRows) group_times<P>(w, r, x, y);
}

}  // namespace
}  // namespace splitspec::kernels

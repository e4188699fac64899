#pragma once
// How the GPU's kernels split a block of weights among the lanes of a warp,
// as functions of the lane that the host runs too: a test sums every lane's
// share on the CPU and finds the block's integer sums (block_arith.h), and
// walks the tensor cores' fragment layouts, so the kernels' index arithmetic
// is checked where no GPU is (tests/backend/warp_math_test.cpp).
//
// Integer sums are exact in any order, so how lanes split them never moves a
// bit; the fragment layouts decide which weight meets which input.
#include <cstdint>
#include <cstring>

#include "common/backend/cuda/block_arith.h"

namespace splitspec::blocks {

// A 32-bit word from 4-byte-aligned memory.
SPLITSPEC_HD uint32_t word_at(const void* p) {
#if defined(__CUDA_ARCH__)
  return *static_cast<const uint32_t*>(p);
#else
  uint32_t w;
  memcpy(&w, p, 4);
  return w;
#endif
}

// c + the dot product of a's and b's four signed bytes.
SPLITSPEC_HD int32_t dp4a(uint32_t a, uint32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int i = 0; i < 4; ++i)
    c += static_cast<int8_t>((a >> (8 * i)) & 0xff) * static_cast<int8_t>((b >> (8 * i)) & 0xff);
  return c;
#endif
}

// Each byte less the other's, modulo 256.
SPLITSPEC_HD uint32_t sub_bytes(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __vsub4(a, b);
#else
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= ((((a >> (8 * i)) & 0xff) - ((b >> (8 * i)) & 0xff)) & 0xff) << (8 * i);
  return r;
#endif
}

// ---- Quantized blocks among lanes -------------------------------------------
// Device layouts (device_weights.h): a Q8_0 row's quants as 32-byte blocks
// with their half scales apart; a Q4_K super-block's 128 quant bytes, its 12
// scale bytes and its (d, dmin) apart; a Q6_K super-block's 128 low and 64
// high quant bytes together (192), its 16 scales and its d apart.

// Lanes sharing one block, and the blocks one pass of a warp covers.
constexpr int kQ8LanesPerBlock = 2, kKLanesPerBlock = 8;

// Lane p (0, 1) of a Q8_0 block: quant bytes [16p, 16p + 16) against the
// same input bytes.
SPLITSPEC_HD int32_t q8_0_lane_sum(int p, const int8_t* wq, const int8_t* xq) {
  int32_t s = 0;
  for (int k = 0; k < 4; ++k) s = dp4a(word_at(wq + 16 * p + 4 * k), word_at(xq + 16 * p + 4 * k), s);
  return s;
}

// Lane p (0..7) of a Q4_K super-block: quant bytes [16p, 16p + 16), whose
// low nibbles are weights 64(p/2) + 16(p%2) + i of sub-block 2(p/2) and whose
// high nibbles are the weights 32 further, of the next sub-block; each
// part's integer dot by its scale. xq: the super-block's 256 inputs.
SPLITSPEC_HD int32_t q4k_lane_sumi(int p, const uint8_t* qs, const uint8_t* scales12, const int8_t* xq) {
  const int jj = p / 2, l0 = 16 * (p % 2);
  int32_t lo = 0, hi = 0;
  for (int k = 0; k < 4; ++k) {
    const uint32_t w = word_at(qs + 16 * p + 4 * k);
    lo = dp4a(w & 0x0F0F0F0Fu, word_at(xq + 64 * jj + l0 + 4 * k), lo);
    hi = dp4a((w >> 4) & 0x0F0F0F0Fu, word_at(xq + 64 * jj + 32 + l0 + 4 * k), hi);
  }
  int sc_lo, sc_hi, m;
  q4k_scale_min(2 * jj, scales12, &sc_lo, &m);
  q4k_scale_min(2 * jj + 1, scales12, &sc_hi, &m);
  return sc_lo * lo + sc_hi * hi;
}
// The same lane's share of the min sum: the even lanes take their two
// sub-blocks' mins against the inputs' 16-sums.
SPLITSPEC_HD int32_t q4k_lane_summ(int p, const uint8_t* scales12, const int16_t* bsums) {
  if (p % 2) return 0;
  const int jj = p / 2;
  int sc, m0, m1;
  q4k_scale_min(2 * jj, scales12, &sc, &m0);
  q4k_scale_min(2 * jj + 1, scales12, &sc, &m1);
  return m0 * (bsums[4 * jj] + bsums[4 * jj + 1]) + m1 * (bsums[4 * jj + 2] + bsums[4 * jj + 3]);
}

// Lane p (0..7) of a Q6_K super-block (q: 128 low bytes, then 64 high):
// half h = p / 4, l from l0 = 8(p % 4): low bytes [64h + l0, +8) and
// [64h + 32 + l0, +8), high bytes [32h + l0, +8), which hold weights
// 128h + 32g + l0 + i for g = 0..3 (sub-blocks 8h + 2g + l0 / 16).
SPLITSPEC_HD int32_t q6k_lane_sumi(int p, const uint8_t* q, const int8_t* scales16, const int8_t* xq) {
  const int h = p / 4, l0 = 8 * (p % 4);
  int32_t dot[4] = {0, 0, 0, 0};
  for (int k = 0; k < 2; ++k) {
    const uint32_t a = word_at(q + 64 * h + l0 + 4 * k), b = word_at(q + 64 * h + 32 + l0 + 4 * k);
    const uint32_t hb = word_at(q + 128 + 32 * h + l0 + 4 * k);
    const uint32_t w[4] = {(a & 0x0F0F0F0Fu) | ((hb << 4) & 0x30303030u), (b & 0x0F0F0F0Fu) | ((hb << 2) & 0x30303030u),
                           ((a >> 4) & 0x0F0F0F0Fu) | (hb & 0x30303030u),
                           ((b >> 4) & 0x0F0F0F0Fu) | ((hb >> 2) & 0x30303030u)};
    for (int g = 0; g < 4; ++g)
      dot[g] = dp4a(sub_bytes(w[g], 0x20202020u), word_at(xq + 128 * h + 32 * g + l0 + 4 * k), dot[g]);
  }
  int32_t s = 0;
  for (int g = 0; g < 4; ++g) s += scales16[8 * h + 2 * g + l0 / 16] * dot[g];
  return s;
}

// ---- K-quants on the int8 tensor cores -------------------------------------
// mma.m16n8k32 (Q4_K's 32-wide sub-blocks) and m16n8k16 (Q6_K's 16-wide
// ones) with int8 inputs and exact int32 sums, by the PTX ISA's fragment
// layouts for integer types: lane 4g + t holds, for rows g and g + 8 of A,
// the quants at sub-block positions 4t .. 4t + 3 (and, for k32, 16 + 4t ..),
// and of B the inputs at the same positions of column (token) g; the sums
// land as C does for 16-bit inputs (c_row, c_n). A word is four signed
// bytes, position 4t first.
SPLITSPEC_HD uint32_t q4k_fragment_word(const uint8_t* qs, int s, int k0) {
  const uint32_t w = word_at(qs + 32 * (s / 2) + k0);
  return s % 2 ? (w >> 4) & 0x0F0F0F0Fu : w & 0x0F0F0F0Fu;
}
// q: a Q6_K super-block's 128 low and 64 high quant bytes; s: the sub-block
// (0..15), weights 16s ..; the quants less 32.
SPLITSPEC_HD uint32_t q6k_fragment_word(const uint8_t* q, int s, int k0) {
  const int h = s / 8, group = (s % 8) / 2, l = 16 * (s % 2) + k0;
  const uint32_t lo = word_at(q + 64 * h + 32 * (group & 1) + l);
  const uint32_t nib = group >= 2 ? (lo >> 4) & 0x0F0F0F0Fu : lo & 0x0F0F0F0Fu;
  const uint32_t bits = (word_at(q + 128 + 32 * h + l) >> (2 * group)) & 0x03030303u;
  return sub_bytes(nib | (bits << 4), 0x20202020u);
}

// ---- Tensor-core fragments (mma.m16n8k16, 16-bit inputs, fp32 sums) -------
// Lane l = 4g + t holds element i of each fragment (PTX ISA, "Matrix
// Fragments for mma.m16n8k16 with floating point type"), two to a register,
// the lower index in the low half:
//   A (16 rows x 16 k, weights): row g + 8((i >> 1) & 1), k 2t + (i & 1) + 8(i >> 2)
//   B (16 k x 8 n, inputs):      k 2t + (i & 1) + 8(i >> 1), n g
//   C (16 rows x 8 n, sums):     row g + 8(i >> 1),          n 2t + (i & 1)
SPLITSPEC_HD int a_row(int lane, int i) { return lane / 4 + 8 * ((i >> 1) & 1); }
SPLITSPEC_HD int a_k(int lane, int i) { return 2 * (lane % 4) + (i & 1) + 8 * (i >> 2); }
SPLITSPEC_HD int b_k(int lane, int i) { return 2 * (lane % 4) + (i & 1) + 8 * (i >> 1); }
SPLITSPEC_HD int b_n(int lane, int) { return lane / 4; }
SPLITSPEC_HD int c_row(int lane, int i) { return lane / 4 + 8 * (i >> 1); }
SPLITSPEC_HD int c_n(int lane, int i) { return 2 * (lane % 4) + (i & 1); }
// The lane and element of A that hold (row, k) of a 16 x 16 tile.
SPLITSPEC_HD void a_position(int row, int k, int* lane, int* i) {
  *lane = 4 * (row % 8) + (k % 8) / 2;
  *i = (k & 1) + 2 * (row / 8) + 4 * (k / 8);
}

// A float matrix on the device as tiles of 16 rows x 16 columns in A
// fragment order: tile (m, s) is 32 lanes x 8 elements, lane by lane, so a
// warp loads a tile with one 16-byte load per lane. Tiles run along the
// columns, then the rows; rows and columns are padded with zeros to 16.
SPLITSPEC_HD int64_t tiled_offset(int64_t row, int64_t col, int64_t cols) {
  const int64_t k_tiles = (cols + 15) / 16;
  int lane, i;
  a_position(static_cast<int>(row % 16), static_cast<int>(col % 16), &lane, &i);
  return ((row / 16) * k_tiles + col / 16) * 256 + lane * 8 + i;
}

// Inputs as B fragments: rows of `cols` values in tiles of 8 rows x 16
// columns, tile (n, s) 32 lanes x 4 elements (8 bytes a lane).
SPLITSPEC_HD int64_t b_tiled_offset(int64_t n, int64_t col, int64_t cols) {
  const int64_t k_tiles = (cols + 15) / 16;
  const int k = static_cast<int>(col % 16);
  const int lane = 4 * static_cast<int>(n % 8) + (k % 8) / 2;
  const int i = (k & 1) + 2 * (k / 8);
  return ((n / 8) * k_tiles + col / 16) * 128 + lane * 4 + i;
}

}  // namespace splitspec::blocks

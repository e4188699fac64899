// The K-quant super-block sums (kquant.h) with NEON's dot product: the same
// integers as superblock_sums, so kquant_dots gives the same bits. Built with
// +dotprod and called only after linear.cpp's check for it.
#include <arm_neon.h>

#include "common/kernels/kquant.h"
#include "common/kernels/linear_isa.h"

namespace splitspec::kernels::neon {

namespace {

// sc x (16 quants . 16 inputs), added to the lanes (quants 0..63 fit int8;
// IQ4_XS's are its signed grid values).
int32x4_t scaled(int32x4_t acc, uint8x16_t q, const int8_t* x, int32_t sc) {
  const int32x4_t dot = vdotq_s32(vdupq_n_s32(0), vreinterpretq_s8_u8(q), vld1q_s8(x));
  return vmlaq_n_s32(acc, dot, sc);
}

int scale_of(int j, const uint8_t* s) { return j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4); }

// Bits `shift`, `shift` + 1 (`mask` 1 or 3) of each byte, moved up to bit 4.
uint8x16_t high_bits(uint8x16_t h, int shift, uint8_t mask) {
  return vshlq_n_u8(vandq_u8(vshlq_u8(h, vdupq_n_s8(static_cast<int8_t>(-shift))), vdupq_n_u8(mask)), 4);
}

}  // namespace

void superblock_sums(WType t, const uint8_t* b, int n, const int8_t* const* xq, const int16_t* const* bsums,
                     int32_t* out) {
  // The block decoded once: 16 vectors of 16 unsigned quants (weights
  // 16v .. 16v + 15) and each vector's scale.
  const uint8x16_t low4 = vdupq_n_u8(0x0F);
  uint8x16_t q[16];
  int32_t scale[16];
  if (t == WType::Q6_K) {
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int h = 0; h < 2; ++h)
      for (int half = 0; half < 2; ++half) {  // l in [16 half, 16 half + 16)
        const uint8x16_t lo0 = vld1q_u8(b + 64 * h + 16 * half), lo1 = vld1q_u8(b + 64 * h + 32 + 16 * half);
        const uint8x16_t hi = vld1q_u8(b + 128 + 32 * h + 16 * half);
        // Weights 128h + 32k + l, as stored plus 32 (0..63); each 16 of them
        // one sub-block, 8h + 2k + half.
        q[8 * h + 0 + half] = vorrq_u8(vandq_u8(lo0, low4), high_bits(hi, 0, 3));
        q[8 * h + 2 + half] = vorrq_u8(vandq_u8(lo1, low4), high_bits(hi, 2, 3));
        q[8 * h + 4 + half] = vorrq_u8(vshrq_n_u8(lo0, 4), high_bits(hi, 4, 3));
        q[8 * h + 6 + half] = vorrq_u8(vshrq_n_u8(lo1, 4), high_bits(hi, 6, 3));
      }
    for (int v = 0; v < 16; ++v) scale[v] = sc[v];
  } else if (t == WType::IQ4_XS) {
    // Vector v: weights 16v ..: the low (v even) or high nibbles of quant
    // bytes 16(v / 2) .., as grid values (signed bytes in q's lanes).
    const int8x16_t grid = vld1q_s8(kIq4Values);
    for (int v = 0; v < 16; ++v) {
      const uint8x16_t bytes = vld1q_u8(b + 8 + 16 * (v / 2));
      const uint8x16_t idx = v % 2 == 0 ? vandq_u8(bytes, low4) : vshrq_n_u8(bytes, 4);
      q[v] = vreinterpretq_u8_s8(vqtbl1q_s8(grid, idx));
      scale[v] = iq4xs_scale(b, v / 2);
    }
  } else if (t == WType::Q2_K || t == WType::Q3_K) {
    // Vector v: weights 128h + 32j + 16half .. (h = v / 8, j = v / 2 % 4,
    // half = v % 2), bits 2j, 2j + 1 of quant bytes 32h + 16half ..; Q3_K's
    // with bit 4h + j of the high-bit bytes 16half .. as bit 2 (the weights
    // plus 4).
    const bool three = t == WType::Q3_K;
    const uint8_t* qs = b + (three ? 32 : 16);
    for (int v = 0; v < 16; ++v) {
      const int h = v / 8, j = v / 2 % 4, half = v % 2;
      const uint8x16_t bytes = vld1q_u8(qs + 32 * h + 16 * half);
      q[v] = vandq_u8(vshlq_u8(bytes, vdupq_n_s8(static_cast<int8_t>(-2 * j))), vdupq_n_u8(3));
      if (three) {
        const uint8x16_t high = vandq_u8(vshlq_u8(vld1q_u8(b + 16 * half), vdupq_n_s8(static_cast<int8_t>(-(4 * h + j)))), vdupq_n_u8(1));
        q[v] = vorrq_u8(q[v], vshlq_n_u8(high, 2));
      }
    }
    // Q2_K's scales: the low nibbles of bytes 0-15.
    for (int v = 0; v < 16; ++v) scale[v] = three ? q3k_scale(b + 96, v) : b[v] & 0xF;
  } else {
    const bool five = t == WType::Q5_K;
    const uint8_t* qs = b + (five ? 48 : 16);
    for (int j = 0; j < 4; ++j) {
      scale[4 * j] = scale[4 * j + 1] = scale_of(2 * j, b + 4);
      scale[4 * j + 2] = scale[4 * j + 3] = scale_of(2 * j + 1, b + 4);
      for (int half = 0; half < 2; ++half) {
        const uint8x16_t bytes = vld1q_u8(qs + 32 * j + 16 * half);
        uint8x16_t lo = vandq_u8(bytes, low4), hi = vshrq_n_u8(bytes, 4);
        if (five) {
          // Bit 2j of qh[l] is weight 64j + l's fifth bit, bit 2j + 1 weight 64j + 32 + l's.
          const uint8x16_t h = vld1q_u8(b + 16 + 16 * half);
          lo = vorrq_u8(lo, high_bits(h, 2 * j, 1));
          hi = vorrq_u8(hi, high_bits(h, 2 * j + 1, 1));
        }
        q[4 * j + half] = lo;
        q[4 * j + 2 + half] = hi;
      }
    }
  }
  for (int j = 0; j < n; ++j) {
    int32x4_t acc = vdupq_n_s32(0);
    for (int v = 0; v < 16; ++v) acc = scaled(acc, q[v], xq[j] + 16 * v, scale[v]);
    int32_t sum = vaddvq_s32(acc);
    if (t == WType::Q6_K || t == WType::Q3_K) {
      // The quants are the weights plus 32 (Q6_K, as stored) or 4 (Q3_K).
      int32_t offset = 0;
      for (int s = 0; s < 16; ++s) offset += scale[s] * bsums[j][s];
      sum -= (t == WType::Q6_K ? 32 : 4) * offset;
    }
    out[j] = sum;
  }
}

}  // namespace splitspec::kernels::neon

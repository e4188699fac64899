// linear() for AArch64 with the dot-product extension (Jetson Orin's
// Cortex-A78AE and later). Built with -march=armv8.2-a+dotprod+fp16
// -ffp-contract=off. Eight lanes are two 4-lane registers, so every output
// follows linear.h's definition exactly as the x86 bodies do.
#include <arm_neon.h>

#include <algorithm>
#include <cstring>

#include "common/kernels/linear_isa.h"

namespace splitspec::kernels::neon {

namespace {

// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) of the lanes lo = l0..l3, hi = l4..l7.
inline float hsum(float32x4_t lo, float32x4_t hi) {
  const float32x4_t s = vaddq_f32(lo, hi);
  const float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
  return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}

struct Eight {
  float32x4_t lo, hi;
};

template <WType T>
inline Eight load8(const uint8_t* p) {
  if (T == WType::F32) return {vld1q_f32(reinterpret_cast<const float*>(p)), vld1q_f32(reinterpret_cast<const float*>(p) + 4)};
  const uint16x8_t h = vld1q_u16(reinterpret_cast<const uint16_t*>(p));
  if (T == WType::F16) {
    const float16x8_t f = vreinterpretq_f16_u16(h);
    return {vcvt_f32_f16(vget_low_f16(f)), vcvt_high_f32_f16(f)};
  }
  return {vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)), vreinterpretq_f32_u32(vshll_high_n_u16(h, 16))};
}

template <WType T>
float float_dot(const uint8_t* w, const float* x, int64_t in) {
  constexpr int64_t es = T == WType::F32 ? 4 : 2;
  float32x4_t lo = vdupq_n_f32(0.0f), hi = lo;
  const int64_t full = in & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8) {
    const Eight wv = load8<T>(w + es * i);
    lo = vfmaq_f32(lo, wv.lo, vld1q_f32(x + i));
    hi = vfmaq_f32(hi, wv.hi, vld1q_f32(x + i + 4));
  }
  if (full < in) {
    alignas(16) uint8_t wpad[32] = {};
    alignas(16) float xpad[8] = {};
    std::memcpy(wpad, w + es * full, es * (in - full));
    std::memcpy(xpad, x + full, sizeof(float) * (in - full));
    const Eight wv = load8<T>(wpad);
    lo = vfmaq_f32(lo, wv.lo, vld1q_f32(xpad));
    hi = vfmaq_f32(hi, wv.hi, vld1q_f32(xpad + 4));
  }
  return hsum(lo, hi);
}

// Packed 32-weight blocks (weight_type.h), four rows a register: quarter
// `qr` of the group at `r`. The weights go in as their signed integers
// (quant.h's block_quants; Q5's fifth bits from qh as packed_qh lays it
// out), and sdot by lane adds a row's 4-byte piece times the input's
// matching 4 bytes into the row's lane: after eight pieces, each lane holds
// its row's exact block sum. Then linear.h's float steps in its order.
template <WType T>
void quant_quarter(const LinearCall& c, int64_t r, int qr, int64_t j) {
  const QuantizedRows& qx = *c.qx;
  const int64_t nb = qx.blocks;
  constexpr int64_t bb = block_bytes(T);
  constexpr int64_t header = bb - block_quant_bytes(T);
  constexpr int64_t qh_at = (block_has_min(T) ? 4 : 2) * kPackRows;
  const PackedBlocks g = packed_blocks(c.w, r);
  float32x4_t acc = vdupq_n_f32(0.0f);
  const int8_t* xrow = qx.q.data() + j * qx.cols;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g.block(b);
    const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(blk) + 4 * qr)));
    const uint8_t* quants = blk + header * kPackRows + 16 * qr;
    int8x16_t w[8];
    if constexpr (T == WType::Q8_0) {
      for (int k = 0; k < 8; ++k) w[k] = vld1q_s8(reinterpret_cast<const int8_t*>(quants + 64 * k));
    } else {
      uint8x16_t u[8];
      for (int k = 0; k < 4; ++k) {
        const uint8x16_t p = vld1q_u8(quants + 64 * k);
        u[k] = vandq_u8(p, vdupq_n_u8(0x0f));
        u[k + 4] = vshrq_n_u8(p, 4);
      }
      if constexpr (block_has_high_bits(T)) {
        const uint32x4_t qh = vld1q_u32(reinterpret_cast<const uint32_t*>(blk + qh_at + 16 * qr));
        const uint32x4_t bit4 = vdupq_n_u32(0x10101010);
        for (int k = 0; k < 4; ++k) {
          u[k] = vorrq_u8(u[k], vreinterpretq_u8_u32(vandq_u32(vshlq_u32(qh, vdupq_n_s32(4 - k)), bit4)));
          u[k + 4] = vorrq_u8(u[k + 4], vreinterpretq_u8_u32(vandq_u32(vshlq_u32(qh, vdupq_n_s32(-k)), bit4)));
        }
      }
      const int8x16_t offset = vdupq_n_s8(T == WType::Q4_0 ? 8 : T == WType::Q5_0 ? 16 : 0);
      const int8x16_t grid = vld1q_s8(kIq4Values);
      for (int k = 0; k < 8; ++k)
        w[k] = T == WType::IQ4_NL ? vqtbl1q_s8(grid, u[k]) : vsubq_s8(vreinterpretq_s8_u8(u[k]), offset);
    }
    const int8x16_t x0 = vld1q_s8(xrow + b * kQBlock), x1 = vld1q_s8(xrow + b * kQBlock + 16);
    int32x4_t s = vdupq_n_s32(0);
    s = vdotq_laneq_s32(s, w[0], x0, 0);
    s = vdotq_laneq_s32(s, w[1], x0, 1);
    s = vdotq_laneq_s32(s, w[2], x0, 2);
    s = vdotq_laneq_s32(s, w[3], x0, 3);
    s = vdotq_laneq_s32(s, w[4], x1, 0);
    s = vdotq_laneq_s32(s, w[5], x1, 1);
    s = vdotq_laneq_s32(s, w[6], x1, 2);
    s = vdotq_laneq_s32(s, w[7], x1, 3);
    const float xd = qx.d[j * nb + b];
    acc = vfmaq_f32(acc, vcvtq_f32_s32(s), vmulq_n_f32(dw, xd));
    if constexpr (block_has_min(T)) {
      const float32x4_t mw =
          vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(blk + 2 * kPackRows) + 4 * qr)));
      acc = vfmaq_n_f32(acc, mw, qx.s[j * nb + b]);
    }
  }
  vst1q_f32(c.y + j * c.w.rows + r + 4 * qr, acc);
}

template <WType T>
void quant_rows(const LinearCall& c, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r += kPackRows)
    for (int qr = 0; qr < 4; ++qr)
      for (int64_t j = 0; j < c.n; ++j) quant_quarter<T>(c, r, qr, j);
}

}  // namespace

void quantize_activations(const float* x, int64_t rows, int64_t cols, QuantizedRows& out) {
  size_quantized(rows, cols, out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < out.blocks; ++b) {
      const float* v = x + r * cols + b * kQBlock;
      float32x4_t in[8], amax = vdupq_n_f32(0.0f);
      for (int k = 0; k < 8; ++k) {
        in[k] = vld1q_f32(v + 4 * k);
        amax = vmaxq_f32(amax, vabsq_f32(in[k]));
      }
      // As quantize_block: the same division, reciprocal and rounding.
      const float scale = vmaxvq_f32(amax) / 127.0f;
      const float id = scale != 0.0f ? 1.0f / scale : 0.0f;
      const int64_t i = r * out.blocks + b;
      out.d[i] = half_to_float(float_to_half(scale));
      int32x4_t q[8], s = vdupq_n_s32(0);
      for (int k = 0; k < 8; ++k) {
        q[k] = vcvtnq_s32_f32(vmulq_n_f32(in[k], id));  // nearest, ties to even
        s = vaddq_s32(s, q[k]);
      }
      out.sum[i] = vaddvq_s32(s);
      out.s[i] = half_to_float(float_to_half(scale * static_cast<float>(out.sum[i])));
      int8_t* dst = out.q.data() + r * cols + b * kQBlock;
      for (int k = 0; k < 8; k += 4) {
        const int16x8_t lo = vcombine_s16(vqmovn_s32(q[k]), vqmovn_s32(q[k + 1]));
        const int16x8_t hi = vcombine_s16(vqmovn_s32(q[k + 2]), vqmovn_s32(q[k + 3]));
        vst1q_s8(dst + 4 * k, vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi)));
      }
    }
}

void linear_rows(const LinearCall& c, int64_t r0, int64_t r1) {
  const int64_t in = c.w.cols;
  switch (c.w.type) {
    case WType::F32:
    case WType::F16:
    case WType::BF16:
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j = 0; j < c.n; ++j) {
          const float* x = c.x + j * in;
          float& y = c.y[j * c.w.rows + r];
          if (c.w.type == WType::F32)
            y = float_dot<WType::F32>(c.w.row(r), x, in);
          else if (c.w.type == WType::F16)
            y = float_dot<WType::F16>(c.w.row(r), x, in);
          else
            y = float_dot<WType::BF16>(c.w.row(r), x, in);
        }
      break;
    case WType::Q8_0: quant_rows<WType::Q8_0>(c, r0, r1); break;
    case WType::Q4_0: quant_rows<WType::Q4_0>(c, r0, r1); break;
    case WType::Q4_1: quant_rows<WType::Q4_1>(c, r0, r1); break;
    case WType::Q5_0: quant_rows<WType::Q5_0>(c, r0, r1); break;
    case WType::Q5_1: quant_rows<WType::Q5_1>(c, r0, r1); break;
    case WType::IQ4_NL: quant_rows<WType::IQ4_NL>(c, r0, r1); break;
    default: break;  // super-blocks never come here: linear() runs them itself
  }
}

}  // namespace splitspec::kernels::neon

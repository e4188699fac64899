// linear() for AArch64 with the dot-product extension (Jetson Orin's
// Cortex-A78AE and later). Built with -march=armv8.2-a+dotprod+fp16
// -ffp-contract=off. Eight lanes are two 4-lane registers, so every output
// follows linear.h's definition exactly as the x86 bodies do.
#include <arm_neon.h>

#include <algorithm>
#include <cstring>

#include "common/engine/linear_isa.h"

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

inline float scale_of(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return half_to_float(h);
}

// R weight rows against one input row, every block: sdot gives lane l the
// exact sum of products 4l..4l+3 of its 16 bytes.
template <WType T, int R>
void quant_rows(const LinearCall& c, int64_t r, int64_t j) {
  const QuantizedRows& qx = *c.qx;
  const int64_t nb = qx.blocks;
  constexpr int64_t bb = block_bytes(T);
  const uint8_t* wrow[R];
  for (int rr = 0; rr < R; ++rr) wrow[rr] = c.w.row(r + rr);
  float32x4_t acc[R][4];  // even lo, even hi, odd lo, odd hi
  for (int rr = 0; rr < R; ++rr)
    for (int k = 0; k < 4; ++k) acc[rr][k] = vdupq_n_f32(0.0f);
  const int8_t* xrow = qx.q.data() + j * qx.cols;
  for (int64_t b = 0; b < nb; ++b) {
    const int8x16_t x0 = vld1q_s8(xrow + b * kQBlock), x1 = vld1q_s8(xrow + b * kQBlock + 16);
    const float dx = qx.d[j * nb + b];
    const int half = static_cast<int>(b & 1) * 2;
    for (int rr = 0; rr < R; ++rr) {
      const uint8_t* blk = wrow[rr] + b * bb;
      int8x16_t w0, w1;
      if (T == WType::Q8_0) {
        w0 = vld1q_s8(reinterpret_cast<const int8_t*>(blk + 2));
        w1 = vld1q_s8(reinterpret_cast<const int8_t*>(blk + 18));
      } else {
        const uint8x16_t packed = vld1q_u8(blk + 2);
        const int8x16_t eight = vdupq_n_s8(8);
        w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(packed, vdupq_n_u8(0x0f))), eight);
        w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(packed, 4)), eight);
      }
      const float32x4_t d = vdupq_n_f32(scale_of(blk) * dx);
      const float32x4_t s0 = vcvtq_f32_s32(vdotq_s32(vdupq_n_s32(0), w0, x0));
      const float32x4_t s1 = vcvtq_f32_s32(vdotq_s32(vdupq_n_s32(0), w1, x1));
      acc[rr][half] = vfmaq_f32(acc[rr][half], s0, d);
      acc[rr][half + 1] = vfmaq_f32(acc[rr][half + 1], s1, d);
    }
  }
  for (int rr = 0; rr < R; ++rr)
    c.y[j * c.w.rows + r + rr] = hsum(vaddq_f32(acc[rr][0], acc[rr][2]), vaddq_f32(acc[rr][1], acc[rr][3]));
}

}  // namespace

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
    case WType::Q8_0:
    case WType::Q4_0:
      for (int64_t j = 0; j < c.n; ++j) {
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) {
          if (c.w.type == WType::Q8_0)
            quant_rows<WType::Q8_0, 4>(c, r, j);
          else
            quant_rows<WType::Q4_0, 4>(c, r, j);
        }
        for (; r < r1; ++r) {
          if (c.w.type == WType::Q8_0)
            quant_rows<WType::Q8_0, 1>(c, r, j);
          else
            quant_rows<WType::Q4_0, 1>(c, r, j);
        }
      }
      break;
  }
}

}  // namespace splitspec::kernels::neon

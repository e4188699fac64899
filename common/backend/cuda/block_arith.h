#pragma once
// The arithmetic of one quantized block, written once for the host and the
// GPU. A quantized product is defined (common/kernels/linear.h, kquant.h) as
// an exact integer sum per block plus one fused multiply-add per block, in
// block order; the activations are quantized per block first. Everything
// here that is not an integer (the activations' scales, the rounding to
// half, the multiply-adds, the dequantized values of an embedding row, our
// own quantizer) is done by these functions, on both sides, so the GPU's
// quantized products equal the CPU reference bit for bit. The CPU tests run
// them against the CPU's own code (tests/backend/block_arith_test.cpp); the
// CPU kernels themselves are unchanged.
//
// Compile without contraction (g++ -ffp-contract=off, nvcc --fmad=false):
// every multiply and add rounds where it is written, and fmaf is the only
// fused one. Free of CUDA headers: under nvcc the functions are also
// __device__.
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SPLITSPEC_HD __host__ __device__ inline
#else
#define SPLITSPEC_HD inline
#endif

namespace splitspec::blocks {

constexpr int kQ8 = 32;      // weights per Q8_0 block
constexpr int kSuper = 256;  // weights per K-quant super-block

SPLITSPEC_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
SPLITSPEC_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// IEEE half to float, exactly (subnormals, infinities, NaN).
SPLITSPEC_HD float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (man << 13));
  if (man == 0) return bits_float(sign);
  // A subnormal: man x 2^-24, exact in float.
  const float v = static_cast<float>(man) * bits_float(0x33800000u);  // 2^-24
  return sign ? -v : v;
}

// Float to IEEE half, rounding to nearest even; NaN stays NaN.
SPLITSPEC_HD uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity (or is)
  if (a < 0x38800000u) {
    // A half subnormal (or zero): a / 2^-24 rounded to nearest even, which
    // float arithmetic does exactly at this size.
    const float scaled = bits_float(a) * bits_float(0x4b800000u);  // x 2^24, exact
    // Round to nearest even by adding and removing 2^23.
    const float r = (scaled + 8388608.0f) - 8388608.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
  }
  // Normal: drop 13 mantissa bits, rounding to nearest even.
  const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

SPLITSPEC_HD float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Float to bfloat16, nearest even, NaN quiet (kernels/weight_type.h's).
SPLITSPEC_HD uint16_t float_to_bf16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

SPLITSPEC_HD float fma1(float a, float b, float c) { return fmaf(a, b, c); }
// Round to nearest even for |v| < 2^22, as nearbyint does in the default
// mode: adding and removing 1.5 x 2^23 leaves it rounded.
SPLITSPEC_HD float round_even(float v) { return (v + 12582912.0f) - 12582912.0f; }

// ---- Activations ------------------------------------------------------

// One block of 32 activations for Q8_0 weights (quant.h): d = max|x| / 127
// rounded to half, q = x * (1 / (max|x| / 127)) rounded to nearest even.
// Its steps, which a GPU runs one lane per value (max|x| by a warp's
// reduction: a maximum is the same in any order).
SPLITSPEC_HD float q8_inverse_scale(float amax) {
  const float scale = amax / 127.0f;
  return scale != 0.0f ? 1.0f / scale : 0.0f;
}
SPLITSPEC_HD float q8_scale(float amax) { return half_to_float(float_to_half(amax / 127.0f)); }
SPLITSPEC_HD int8_t q8_quant(float v, float inverse_scale) { return static_cast<int8_t>(round_even(v * inverse_scale)); }
SPLITSPEC_HD void quantize_q8_block(const float* v, int8_t* q, float* d, int32_t* sum) {
  float amax = 0.0f;
  for (int i = 0; i < kQ8; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const float id = q8_inverse_scale(amax);
  *d = q8_scale(amax);
  int32_t s = 0;
  for (int i = 0; i < kQ8; ++i) {
    q[i] = q8_quant(v[i], id);
    s += q[i];
  }
  *sum = s;
}

// Its steps (max: the first value of largest magnitude, which a GPU finds
// by a reduction that prefers the lower index among equal magnitudes).
SPLITSPEC_HD float q8k_inverse_scale(float max) { return -127.0f / max; }
SPLITSPEC_HD int8_t q8k_quant(float v, float iscale) {
  return static_cast<int8_t>(fminf(127.0f, round_even(iscale * v)));
}

// One super-block of 256 activations for K-quant weights (llama.cpp's Q8_K,
// kquant.h): max the signed value of largest magnitude (the first such),
// iscale = -127 / max, q = min(127, round(iscale * x)), d = 1 / iscale, and
// each 16 q's sum.
SPLITSPEC_HD void quantize_q8k_block(const float* v, int8_t* q, float* d, int16_t* bsums) {
  float max = 0.0f, amax = 0.0f;
  for (int i = 0; i < kSuper; ++i)
    if (fabsf(v[i]) > amax) {
      amax = fabsf(v[i]);
      max = v[i];
    }
  if (amax == 0.0f) {
    *d = 0.0f;
    for (int i = 0; i < kSuper; ++i) q[i] = 0;
    for (int g = 0; g < 16; ++g) bsums[g] = 0;
    return;
  }
  const float iscale = q8k_inverse_scale(max);
  for (int i = 0; i < kSuper; ++i) q[i] = q8k_quant(v[i], iscale);
  for (int g = 0; g < 16; ++g) {
    int s = 0;
    for (int i = 0; i < 16; ++i) s += q[16 * g + i];
    bsums[g] = static_cast<int16_t>(s);
  }
  *d = 1.0f / iscale;
}

// ---- Per-block products -------------------------------------------------

// A Q8_0 block's term: acc + isum x (d_w x d_x), one rounding for the
// multiply-add (linear.h).
SPLITSPEC_HD float q8_0_accumulate(float acc, int32_t isum, float dw, float dx) {
  return fma1(static_cast<float>(isum), dw * dx, acc);
}

// A K-quant super-block's terms (kquant.h's kquant_dots): its scaled sum by
// d_w x d_x, then, for types with mins, its min sum by -(dmin_w x d_x).
SPLITSPEC_HD float kquant_accumulate(float acc, int32_t sumi, float d, float dx) {
  return fma1(d * dx, static_cast<float>(sumi), acc);
}
SPLITSPEC_HD float kquant_accumulate_mins(float acc, int32_t sumi, int32_t summ, float d, float dmin, float dx) {
  acc = fma1(d * dx, static_cast<float>(sumi), acc);
  return fma1(-(dmin * dx), static_cast<float>(summ), acc);
}

// Q4_K (and Q5_K) sub-block j's 6-bit scale and min from the 12 packed bytes.
SPLITSPEC_HD void q4k_scale_min(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// Weight w's 4-bit quant (0..15) from Q4_K's 128 quant bytes: byte
// 32(w / 64) + w % 32, low nibble for w % 64 < 32.
SPLITSPEC_HD int q4k_quant(const uint8_t* qs, int w) {
  const uint8_t b = qs[32 * (w / 64) + w % 32];
  return (w % 64) < 32 ? (b & 0xF) : (b >> 4);
}
// Weight w's quant less 32 (-32..31) from Q6_K's 128 low and 64 high bytes.
SPLITSPEC_HD int q6k_quant(const uint8_t* ql, const uint8_t* qh, int w) {
  const int h = w / 128, r = w % 128, part = r / 32, l = r % 32;
  const uint8_t lo = ql[64 * h + l + (part & 1) * 32];
  const int low = part < 2 ? (lo & 0xF) : (lo >> 4);
  const int high = (qh[32 * h + l] >> (2 * part)) & 3;
  return (low | (high << 4)) - 32;
}

// The integer sums of a Q4_K super-block against Q8_K activations xq (256)
// and their 16-sums: sumi = sum over sub-blocks of scale x (q . x), summ =
// sum of min x the sub-block's two 16-sums.
SPLITSPEC_HD int32_t q4k_sumi(const uint8_t* scales12, const uint8_t* qs, const int8_t* xq) {
  int32_t sumi = 0;
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    q4k_scale_min(s, scales12, &sc, &m);
    int32_t part = 0;
    for (int i = 32 * s; i < 32 * s + 32; ++i) part += q4k_quant(qs, i) * xq[i];
    sumi += sc * part;
  }
  return sumi;
}
SPLITSPEC_HD int32_t q4k_summ(const uint8_t* scales12, const int16_t* bsums) {
  int32_t summ = 0;
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    q4k_scale_min(s, scales12, &sc, &m);
    summ += m * (bsums[2 * s] + bsums[2 * s + 1]);
  }
  return summ;
}
// Q6_K: sumi = sum over its 16 sub-blocks of the int8 scale x ((q - 32) . x).
SPLITSPEC_HD int32_t q6k_sumi(const uint8_t* ql, const uint8_t* qh, const int8_t* scales16, const int8_t* xq) {
  int32_t sumi = 0;
  for (int s = 0; s < 16; ++s) {
    int32_t part = 0;
    for (int i = 16 * s; i < 16 * s + 16; ++i) part += q6k_quant(ql, qh, i) * xq[i];
    sumi += scales16[s] * part;
  }
  return sumi;
}
SPLITSPEC_HD int32_t q8_0_sumi(const int8_t* wq, const int8_t* xq) {
  int32_t s = 0;
  for (int i = 0; i < kQ8; ++i) s += wq[i] * xq[i];
  return s;
}

// ---- Dequantized values (embedding rows) ----------------------------------

// As the CPU's dequantize_rows: d x q for Q8_0; (d x sc) x q - dmin x m for
// Q4_K; (d x sc) x q for Q6_K.
SPLITSPEC_HD float q8_0_value(float d, int8_t q) { return d * static_cast<float>(q); }
SPLITSPEC_HD float q4k_value(float d, float dmin, const uint8_t* scales12, const uint8_t* qs, int w) {
  int sc, m;
  q4k_scale_min(w / 32, scales12, &sc, &m);
  const float step = d * static_cast<float>(sc), offset = dmin * static_cast<float>(m);
  return step * static_cast<float>(q4k_quant(qs, w)) - offset;
}
SPLITSPEC_HD float q6k_value(float d, const int8_t* scales16, const uint8_t* ql, const uint8_t* qh, int w) {
  return d * static_cast<float>(scales16[w / 16]) * static_cast<float>(q6k_quant(ql, qh, w));
}

// ---- Our quantizer (kquant.cpp's quantize_superblock), for weights made on
// the GPU: the same bytes the CPU writes for the same floats. ----------------

SPLITSPEC_HD int clamp_round(float v, int lo, int hi) {
  const float c = fminf(fmaxf(v, static_cast<float>(lo)), static_cast<float>(hi));
  return static_cast<int>(round_even(c));
}
SPLITSPEC_HD void put_half(uint8_t* p, float v) {
  const uint16_t h = float_to_half(v);
  p[0] = static_cast<uint8_t>(h & 0xff);
  p[1] = static_cast<uint8_t>(h >> 8);
}
SPLITSPEC_HD float get_half(const uint8_t* p) {
  return half_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

// 256 floats as one Q4_K super-block (144 bytes, llama.cpp's layout).
SPLITSPEC_HD void quantize_q4k(const float* x, uint8_t* b) {
  constexpr int top = 15;
  float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < 8; ++s) {
    float lo = 0.0f, hi = x[32 * s];
    for (int i = 32 * s; i < 32 * s + 32; ++i) {
      lo = fminf(lo, x[i]);
      hi = fmaxf(hi, x[i]);
    }
    scale[s] = (hi - lo) / static_cast<float>(top);
    min[s] = -lo;
    max_scale = fmaxf(max_scale, scale[s]);
    max_min = fmaxf(max_min, min[s]);
  }
  for (int i = 0; i < 144; ++i) b[i] = 0;
  put_half(b, max_scale / 63.0f);
  put_half(b + 2, max_min / 63.0f);
  const float d = get_half(b), dmin = get_half(b + 2);
  int sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0.0f ? clamp_round(scale[s] / d, 0, 63) : 0;
    m[s] = dmin > 0.0f ? clamp_round(min[s] / dmin, 0, 63) : 0;
  }
  uint8_t* packed = b + 4;
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
  uint8_t* qs = b + 16;
  for (int j = 0; j < 4; ++j)
    for (int l = 0; l < 32; ++l) {
      int q2[2];
      for (int half = 0; half < 2; ++half) {
        const int s = 2 * j + half, i = 64 * j + 32 * half + l;
        const float step = d * static_cast<float>(sc[s]), offset = dmin * static_cast<float>(m[s]);
        q2[half] = step > 0.0f ? clamp_round((x[i] + offset) / step, 0, top) : 0;
      }
      qs[32 * j + l] = static_cast<uint8_t>((q2[0] & 0xF) | ((q2[1] & 0xF) << 4));
    }
}

// 256 floats as one Q6_K super-block (210 bytes, llama.cpp's layout).
SPLITSPEC_HD void quantize_q6k(const float* x, uint8_t* b) {
  float scales[16], max_scale = 0.0f, amax_scale = 0.0f;
  for (int s = 0; s < 16; ++s) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 16 * s; i < 16 * s + 16; ++i)
      if (fabsf(x[i]) > amax) {
        amax = fabsf(x[i]);
        max = x[i];
      }
    scales[s] = max / -32.0f;
    if (fabsf(scales[s]) > amax_scale) {
      amax_scale = fabsf(scales[s]);
      max_scale = scales[s];
    }
  }
  for (int i = 0; i < 210; ++i) b[i] = 0;
  if (amax_scale == 0.0f) return;
  const float iscale = -128.0f / max_scale;
  put_half(b + 208, 1.0f / iscale);
  const float d = get_half(b + 208);
  int8_t q[kSuper];
  for (int s = 0; s < 16; ++s) {
    const int sc = static_cast<int>(fminf(127.0f, round_even(iscale * scales[s])));
    b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(sc));
    const float step = d * static_cast<float>(sc);
    for (int i = 16 * s; i < 16 * s + 16; ++i)
      q[i] = static_cast<int8_t>(step != 0.0f ? clamp_round(x[i] / step, -32, 31) : 0);
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const int q0 = q[128 * h + l] + 32, q1 = q[128 * h + l + 32] + 32, q2 = q[128 * h + l + 64] + 32,
                q3 = q[128 * h + l + 96] + 32;
      ql[64 * h + l] = static_cast<uint8_t>((q0 & 0xF) | ((q2 & 0xF) << 4));
      ql[64 * h + l + 32] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      qh[32 * h + l] = static_cast<uint8_t>((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
    }
}

}  // namespace splitspec::blocks

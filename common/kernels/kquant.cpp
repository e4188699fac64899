// Built with -ffp-contract=off: the dequantized values and the dot products'
// multiply-adds are exactly as written (kquant.h).
#include "common/kernels/kquant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/util/error.h"

namespace splitspec {

namespace {

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// Q4_K's and Q5_K's packing of eight 6-bit scales and eight 6-bit mins.
void scale_min(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// A super-block's quants as integers in weight order, with the scales of
// its sub-blocks (32 weights for Q4_K/Q5_K; 16 for Q2_K, Q3_K and Q6_K;
// Q2_K, Q4_K and Q5_K also have mins) and its half-precision scales.
struct Unpacked {
  int8_t q[kSuperBlock];
  int sc[16], m[16];
  float d, dmin;
};

// Sub-blocks per super-block: 16 of 16 weights, or Q4_K's, Q5_K's and
// IQ4_XS's 8 of 32.
int sub_blocks(WType t) { return t == WType::Q4_K || t == WType::Q5_K || t == WType::IQ4_XS ? 8 : 16; }

// The sub-blocks' mins of a type that has them (superblock_has_mins).
void read_mins(WType t, const uint8_t* b, int m[16]) {
  if (t == WType::Q2_K) {
    for (int s = 0; s < 16; ++s) m[s] = b[s] >> 4;
    return;
  }
  for (int s = 0; s < 8; ++s) {
    int sc;
    scale_min(s, b + 4, &sc, &m[s]);
  }
}

void unpack(WType t, const uint8_t* b, Unpacked& u) {
  if (t == WType::IQ4_XS) {
    u.d = half_at(b);
    u.dmin = 0.0f;
    for (int s = 0; s < 8; ++s) u.sc[s] = iq4xs_scale(b, s);
    // Weight 32s + l: the low nibble of quant byte 16s + l (l < 16), else
    // the high nibble of byte 16s + l - 16, as a grid value.
    for (int w = 0; w < kSuperBlock; ++w) {
      const uint8_t byte = b[8 + 16 * (w / 32) + w % 16];
      u.q[w] = kIq4Values[w % 32 < 16 ? byte & 0xF : byte >> 4];
    }
    return;
  }
  if (t == WType::Q2_K) {
    // Weight 128h + 32j + l: bits 2j, 2j + 1 of quant byte 32h + l.
    for (int s = 0; s < 16; ++s) u.sc[s] = b[s] & 0xF;
    read_mins(t, b, u.m);
    u.d = half_at(b + 80);
    u.dmin = half_at(b + 82);
    for (int w = 0; w < kSuperBlock; ++w)
      u.q[w] = static_cast<int8_t>((b[16 + 32 * (w / 128) + w % 32] >> (2 * (w % 128 / 32))) & 3);
    return;
  }
  if (t == WType::Q3_K) {
    for (int j = 0; j < 16; ++j) u.sc[j] = q3k_scale(b + 96, j);
    u.d = half_at(b + 108);
    u.dmin = 0.0f;
    // Weight 128h + 32j + l: bits 2j, 2j + 1 of quant byte 32 + 32h + l,
    // less 4 unless bit 4h + j of high-bit byte l is set.
    for (int w = 0; w < kSuperBlock; ++w) {
      const int h = w / 128, j = w % 128 / 32, l = w % 32;
      const int q = (b[32 + 32 * h + l] >> (2 * j)) & 3;
      u.q[w] = static_cast<int8_t>(q - ((b[l] >> (4 * h + j)) & 1 ? 0 : 4));
    }
    return;
  }
  if (t == WType::Q6_K) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int s = 0; s < 16; ++s) u.sc[s] = sc[s];
    u.d = half_at(b + 208);
    u.dmin = 0.0f;
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo0 = ql[64 * h + l], lo1 = ql[64 * h + l + 32], hi = qh[32 * h + l];
        int8_t* q = u.q + 128 * h + l;
        q[0] = static_cast<int8_t>(((lo0 & 0xF) | (((hi >> 0) & 3) << 4)) - 32);
        q[32] = static_cast<int8_t>(((lo1 & 0xF) | (((hi >> 2) & 3) << 4)) - 32);
        q[64] = static_cast<int8_t>(((lo0 >> 4) | (((hi >> 4) & 3) << 4)) - 32);
        q[96] = static_cast<int8_t>(((lo1 >> 4) | (((hi >> 6) & 3) << 4)) - 32);
      }
    return;
  }
  u.d = half_at(b);
  u.dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  for (int s = 0; s < 8; ++s) scale_min(s, scales, &u.sc[s], &u.m[s]);
  const bool five = t == WType::Q5_K;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (five ? 48 : 16);
  for (int j = 0; j < 4; ++j)
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = qs[32 * j + l];
      int lo = byte & 0xF, hi = byte >> 4;
      if (five) {
        lo += (qh[l] >> (2 * j)) & 1 ? 16 : 0;
        hi += (qh[l] >> (2 * j + 1)) & 1 ? 16 : 0;
      }
      u.q[64 * j + l] = static_cast<int8_t>(lo);
      u.q[64 * j + 32 + l] = static_cast<int8_t>(hi);
    }
}

}  // namespace

void dequantize_superblock(WType t, const uint8_t* block, float* y) {
  Unpacked u;
  unpack(t, block, u);
  if (t == WType::Q6_K || t == WType::Q3_K) {
    for (int i = 0; i < kSuperBlock; ++i) y[i] = u.d * static_cast<float>(u.sc[i / 16]) * static_cast<float>(u.q[i]);
    return;
  }
  if (t == WType::IQ4_XS) {
    for (int i = 0; i < kSuperBlock; ++i) y[i] = u.d * static_cast<float>(u.sc[i / 32]) * static_cast<float>(u.q[i]);
    return;
  }
  if (t == WType::Q2_K) {
    for (int s = 0; s < 16; ++s) {
      const float d = u.d * static_cast<float>(u.sc[s]), m = u.dmin * static_cast<float>(u.m[s]);
      for (int i = 16 * s; i < 16 * s + 16; ++i) y[i] = d * static_cast<float>(u.q[i]) - m;
    }
    return;
  }
  for (int s = 0; s < 8; ++s) {
    const float d = u.d * static_cast<float>(u.sc[s]), m = u.dmin * static_cast<float>(u.m[s]);
    for (int i = 32 * s; i < 32 * s + 32; ++i) y[i] = d * static_cast<float>(u.q[i]) - m;
  }
}

namespace {

void put_half(uint8_t* p, float v) {
  const uint16_t h = float_to_half(v);
  std::memcpy(p, &h, 2);
}

// Clamped before the conversion, which a far-off quotient would overflow.
int clamp_round(float v, int lo, int hi) {
  return static_cast<int>(std::nearbyint(std::clamp(v, static_cast<float>(lo), static_cast<float>(hi))));
}

// Per 16 weights, the scale that maps the value of largest magnitude to
// -`top` (Q6_K's and Q3_K's first step); returns the scale of largest
// magnitude, signed (0 for an all-zero block).
float signed_scales_16(const float* x, float top, float* scales) {
  float max_scale = 0.0f, amax_scale = 0.0f;
  for (int s = 0; s < 16; ++s) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 16 * s; i < 16 * s + 16; ++i)
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
    scales[s] = max / -top;
    if (std::fabs(scales[s]) > amax_scale) {
      amax_scale = std::fabs(scales[s]);
      max_scale = scales[s];
    }
  }
  return max_scale;
}

void quantize_q6_k(const float* x, uint8_t* b) {
  float scales[16];
  const float max_scale = signed_scales_16(x, 32.0f, scales);
  std::memset(b, 0, 210);
  if (max_scale == 0.0f) return;
  const float iscale = -128.0f / max_scale;
  put_half(b + 208, 1.0f / iscale);
  const float d = half_at(b + 208);
  int8_t q[kSuperBlock];
  for (int s = 0; s < 16; ++s) {
    const int sc = std::min(127, static_cast<int>(std::nearbyint(iscale * scales[s])));
    b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(sc));
    const float step = d * static_cast<float>(sc);
    for (int i = 16 * s; i < 16 * s + 16; ++i) q[i] = static_cast<int8_t>(step != 0.0f ? clamp_round(x[i] / step, -32, 31) : 0);
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

// Q4_K (top 15) and Q5_K (top 31): per 32 weights a scale and a min (the
// negated lower end of the range, never below zero), each quantized to 6 bits
// against the super-block's d and dmin.
void quantize_q45_k(const float* x, uint8_t* b, int top) {
  float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < 8; ++s) {
    float lo = 0.0f, hi = x[32 * s];
    for (int i = 32 * s; i < 32 * s + 32; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    scale[s] = (hi - lo) / static_cast<float>(top);
    min[s] = -lo;
    max_scale = std::max(max_scale, scale[s]);
    max_min = std::max(max_min, min[s]);
  }
  const bool five = top == 31;
  std::memset(b, 0, five ? 176 : 144);
  put_half(b, max_scale / 63.0f);
  put_half(b + 2, max_min / 63.0f);
  const float d = half_at(b), dmin = half_at(b + 2);
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
  uint8_t q[kSuperBlock];
  for (int s = 0; s < 8; ++s) {
    const float step = d * static_cast<float>(sc[s]), offset = dmin * static_cast<float>(m[s]);
    for (int i = 32 * s; i < 32 * s + 32; ++i)
      q[i] = static_cast<uint8_t>(step > 0.0f ? clamp_round((x[i] + offset) / step, 0, top) : 0);
  }
  uint8_t* qh = b + 16;
  uint8_t* qs = b + (five ? 48 : 16);
  for (int j = 0; j < 4; ++j)
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo = q[64 * j + l], hi = q[64 * j + 32 + l];
      qs[32 * j + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      if (five) qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * j)) | ((hi >> 4) << (2 * j + 1)));
    }
}

// Q3_K: as Q6_K, per 16 weights the scale that maps the value of largest
// magnitude to -4, the scales quantized to signed 6 bits against d; the
// quants -4..3 stored plus 4 (low 2 bits in qs, the third in hmask).
void quantize_q3_k(const float* x, uint8_t* b) {
  float scales[16];
  const float max_scale = signed_scales_16(x, 4.0f, scales);
  std::memset(b, 0, 110);
  int sc[16] = {};
  if (max_scale != 0.0f) {
    const float iscale = -32.0f / max_scale;
    put_half(b + 108, 1.0f / iscale);
    for (int s = 0; s < 16; ++s) sc[s] = clamp_round(iscale * scales[s], -32, 31);
  }
  for (int j = 0; j < 16; ++j) {
    const int v = sc[j] + 32;
    b[96 + j % 8] |= static_cast<uint8_t>((v & 0xF) << (j < 8 ? 0 : 4));
    b[96 + 8 + j % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (j / 4)));
  }
  const float d = half_at(b + 108);
  for (int w = 0; w < kSuperBlock; ++w) {
    const float step = d * static_cast<float>(q3k_scale(b + 96, w / 16));
    const int u = (step != 0.0f ? clamp_round(x[w] / step, -4, 3) : 0) + 4;
    const int h = w / 128, j = w % 128 / 32, l = w % 32;
    b[32 + 32 * h + l] |= static_cast<uint8_t>((u & 3) << (2 * j));
    if (u & 4) b[l] |= static_cast<uint8_t>(1 << (4 * h + j));
  }
}

// Q2_K: as Q4_K, per 16 weights a scale and a min (the negated lower end of
// the range, never below zero), each quantized to 4 bits against d and dmin;
// the quants 0..3.
void quantize_q2_k(const float* x, uint8_t* b) {
  float scale[16], min[16], max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < 16; ++s) {
    float lo = 0.0f, hi = x[16 * s];
    for (int i = 16 * s; i < 16 * s + 16; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    scale[s] = (hi - lo) / 3.0f;
    min[s] = -lo;
    max_scale = std::max(max_scale, scale[s]);
    max_min = std::max(max_min, min[s]);
  }
  std::memset(b, 0, 84);
  put_half(b + 80, max_scale / 15.0f);
  put_half(b + 82, max_min / 15.0f);
  const float d = half_at(b + 80), dmin = half_at(b + 82);
  for (int s = 0; s < 16; ++s) {
    const int sc = d > 0.0f ? clamp_round(scale[s] / d, 0, 15) : 0;
    const int m = dmin > 0.0f ? clamp_round(min[s] / dmin, 0, 15) : 0;
    b[s] = static_cast<uint8_t>(sc | (m << 4));
    const float step = d * static_cast<float>(sc), offset = dmin * static_cast<float>(m);
    for (int w = 16 * s; w < 16 * s + 16; ++w) {
      const int q = step > 0.0f ? clamp_round((x[w] + offset) / step, 0, 3) : 0;
      b[16 + 32 * (w / 128) + w % 32] |= static_cast<uint8_t>(q << (2 * (w % 128 / 32)));
    }
  }
}

}  // namespace

void quantize_superblock(WType t, const float* x, uint8_t* block) {
  switch (t) {
    case WType::Q6_K: return quantize_q6_k(x, block);
    case WType::Q5_K: return quantize_q45_k(x, block, 31);
    case WType::Q4_K: return quantize_q45_k(x, block, 15);
    case WType::Q3_K: return quantize_q3_k(x, block);
    case WType::Q2_K: return quantize_q2_k(x, block);
    default:
      throw Error(std::string("kquant: ") + wtype_name(t) +
                  " is read but not written (write q2_k, q3_k, q4_k, q5_k or q6_k)");
  }
}

bool superblock_scales_finite(WType t, const uint8_t* block) {
  const uint8_t* d = block + superblock_d_offset(t);
  return std::isfinite(half_at(d)) && (!superblock_has_mins(t) || std::isfinite(half_at(d + 2)));
}

void quantize_q8k(const float* x, int64_t rows, int64_t cols, Q8KRows& out, Q8KSuperblock one) {
  const int64_t nb = cols / kSuperBlock;
  out.rows = rows;
  out.cols = cols;
  out.blocks = nb;
  out.q.resize(static_cast<size_t>(rows * cols));
  out.d.resize(static_cast<size_t>(rows * nb));
  out.bsums.resize(static_cast<size_t>(rows * nb * 16));
  out.q6k_starts.resize(out.bsums.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = r * nb + b;
      one(x + r * cols + b * kSuperBlock, out.q.data() + r * cols + b * kSuperBlock, out.d[at], out.bsums.data() + at * 16);
    }
  for (size_t i = 0; i < out.bsums.size(); ++i) out.q6k_starts[i] = -32 * out.bsums[i];
}

void quantize_q8k_superblock(const float* v, int8_t* q, float& d, int16_t* sums) {
  float max = 0.0f, amax = 0.0f;
  for (int i = 0; i < kSuperBlock; ++i)
    if (std::fabs(v[i]) > amax) {
      amax = std::fabs(v[i]);
      max = v[i];
    }
  if (amax == 0.0f) {
    d = 0.0f;
    std::fill(q, q + kSuperBlock, 0);
    std::fill(sums, sums + 16, 0);
    return;
  }
  const float iscale = -127.0f / max;
  // Rounded to nearest even as std::nearbyint does in the default mode,
  // without its library call: |iscale * v| <= 127, so adding and taking
  // away 1.5 x 2^23 leaves it rounded (-ffp-contract=off keeps both).
  constexpr float kRound = 12582912.0f;
  for (int i = 0; i < kSuperBlock; ++i) q[i] = static_cast<int8_t>(std::min(127.0f, (iscale * v[i] + kRound) - kRound));
  for (int g = 0; g < 16; ++g) {
    int s = 0;
    for (int i = 0; i < 16; ++i) s += q[16 * g + i];
    sums[g] = static_cast<int16_t>(s);
  }
  d = 1.0f / iscale;
}

void superblock_sums(WType t, const uint8_t* block, int n, const int8_t* const* xq, const int16_t* const*,
                     int32_t* out) {
  Unpacked u;
  unpack(t, block, u);
  const int width = kSuperBlock / sub_blocks(t);
  for (int j = 0; j < n; ++j) {
    int32_t sumi = 0;
    for (int s = 0; s < kSuperBlock / width; ++s) {
      int32_t part = 0;
      for (int i = width * s; i < width * (s + 1); ++i) part += static_cast<int32_t>(u.q[i]) * xq[j][i];
      sumi += u.sc[s] * part;
    }
    out[j] = sumi;
  }
}

void kquant_dots(WType t, const uint8_t* row, int64_t cols, const Q8KRows& x, int64_t j0, int n, float* out,
                 int64_t stride, SuperblockSums sums) {
  const int64_t nb = cols / kSuperBlock, sb = superblock_bytes(t);
  float acc[kMaxDotRows] = {};
  const int8_t* xq[kMaxDotRows];
  const int16_t* bs[kMaxDotRows];
  int32_t sumi[kMaxDotRows];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* block = row + b * sb;
    for (int i = 0; i < n; ++i) {
      xq[i] = x.q.data() + (j0 + i) * x.cols + b * kSuperBlock;
      bs[i] = x.bsums.data() + ((j0 + i) * nb + b) * 16;
    }
    sums(t, block, n, xq, bs, sumi);
    const float d = half_at(block + superblock_d_offset(t));
    if (!superblock_has_mins(t)) {
      for (int i = 0; i < n; ++i) acc[i] = std::fma(d * x.d[(j0 + i) * nb + b], static_cast<float>(sumi[i]), acc[i]);
      continue;
    }
    // Each min covers one sub-block: one of the activations' 16-sums (Q2_K)
    // or two (Q4_K, Q5_K).
    const int subs = sub_blocks(t), per = 16 / subs;
    int m[16];
    read_mins(t, block, m);
    const float dmin = half_at(block + superblock_d_offset(t) + 2);
    for (int i = 0; i < n; ++i) {
      const float xd = x.d[(j0 + i) * nb + b];
      acc[i] = std::fma(d * xd, static_cast<float>(sumi[i]), acc[i]);
      int32_t summ = 0;
      for (int s = 0; s < subs; ++s) {
        int32_t bsum = 0;
        for (int k = 0; k < per; ++k) bsum += bs[i][per * s + k];
        summ += m[s] * bsum;
      }
      acc[i] = std::fma(-(dmin * xd), static_cast<float>(summ), acc[i]);
    }
  }
  for (int i = 0; i < n; ++i) out[i * stride] = acc[i];
}

}  // namespace splitspec

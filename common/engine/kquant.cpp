// Built with -ffp-contract=off: the dequantized values and the dot products'
// multiply-adds are exactly as written (kquant.h).
#include "common/engine/kquant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
// its sub-blocks (32 weights for Q4_K/Q5_K, which also have mins; 16 for
// Q6_K) and its half-precision scales.
struct Unpacked {
  int8_t q[kSuperBlock];
  int sc[16], m[8];
  float d, dmin;
};

void unpack(WType t, const uint8_t* b, Unpacked& u) {
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
  if (t == WType::Q6_K) {
    for (int i = 0; i < kSuperBlock; ++i) y[i] = u.d * static_cast<float>(u.sc[i / 16]) * static_cast<float>(u.q[i]);
    return;
  }
  for (int s = 0; s < 8; ++s) {
    const float d = u.d * static_cast<float>(u.sc[s]), m = u.dmin * static_cast<float>(u.m[s]);
    for (int i = 32 * s; i < 32 * s + 32; ++i) y[i] = d * static_cast<float>(u.q[i]) - m;
  }
}

bool superblock_scales_finite(WType t, const uint8_t* block) {
  if (t == WType::Q6_K) return std::isfinite(half_at(block + 208));
  return std::isfinite(half_at(block)) && std::isfinite(half_at(block + 2));
}

void quantize_q8k(const float* x, int64_t rows, int64_t cols, Q8KRows& out) {
  const int64_t nb = cols / kSuperBlock;
  out.rows = rows;
  out.cols = cols;
  out.blocks = nb;
  out.q.resize(static_cast<size_t>(rows * cols));
  out.d.resize(static_cast<size_t>(rows * nb));
  out.bsums.resize(static_cast<size_t>(rows * nb * 16));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = x + r * cols + b * kSuperBlock;
      int8_t* q = out.q.data() + r * cols + b * kSuperBlock;
      int16_t* sums = out.bsums.data() + (r * nb + b) * 16;
      float max = 0.0f, amax = 0.0f;
      for (int i = 0; i < kSuperBlock; ++i)
        if (std::fabs(v[i]) > amax) {
          amax = std::fabs(v[i]);
          max = v[i];
        }
      if (amax == 0.0f) {
        out.d[r * nb + b] = 0.0f;
        std::fill(q, q + kSuperBlock, 0);
        std::fill(sums, sums + 16, 0);
        continue;
      }
      const float iscale = -127.0f / max;
      for (int i = 0; i < kSuperBlock; ++i) q[i] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(iscale * v[i])));
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += q[16 * g + i];
        sums[g] = static_cast<int16_t>(s);
      }
      out.d[r * nb + b] = 1.0f / iscale;
    }
}

int32_t superblock_sum(WType t, const uint8_t* block, const int8_t* xq, const int16_t*) {
  Unpacked u;
  unpack(t, block, u);
  const int width = t == WType::Q6_K ? 16 : 32;
  int32_t sumi = 0;
  for (int s = 0; s < kSuperBlock / width; ++s) {
    int32_t part = 0;
    for (int i = width * s; i < width * (s + 1); ++i) part += static_cast<int32_t>(u.q[i]) * xq[i];
    sumi += u.sc[s] * part;
  }
  return sumi;
}

float kquant_dot(WType t, const uint8_t* row, int64_t cols, const Q8KRows& x, int64_t j, SuperblockSum sum) {
  const int64_t nb = cols / kSuperBlock, sb = superblock_bytes(t);
  const int8_t* xq = x.q.data() + j * x.cols;
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* block = row + b * sb;
    const int16_t* sums = x.bsums.data() + (j * nb + b) * 16;
    const float xd = x.d[j * nb + b];
    const int32_t sumi = sum(t, block, xq + b * kSuperBlock, sums);
    if (t == WType::Q6_K) {
      acc = std::fma(half_at(block + 208) * xd, static_cast<float>(sumi), acc);
      continue;
    }
    acc = std::fma(half_at(block) * xd, static_cast<float>(sumi), acc);
    int32_t summ = 0;
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      scale_min(s, block + 4, &sc, &m);
      summ += m * (sums[2 * s] + sums[2 * s + 1]);
    }
    acc = std::fma(-(half_at(block + 2) * xd), static_cast<float>(summ), acc);
  }
  return acc;
}

}  // namespace splitspec

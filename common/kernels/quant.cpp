#include "common/kernels/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/kernels/kquant.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

void quantize_q8_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int i = 0; i < kQBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t dh = float_to_half(d);
  std::memcpy(out, &dh, 2);
  for (int i = 0; i < kQBlock; ++i) out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[i] * id)));
}

void quantize_q4_0(const float* x, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < kQBlock; ++i)
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t dh = float_to_half(d);
  std::memcpy(out, &dh, 2);
  for (int i = 0; i < kQBlock / 2; ++i) {
    const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[i] * id + 8.5f)));
    const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[i + 16] * id + 8.5f)));
    out[2 + i] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

float block_scale(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return half_to_float(h);
}

}  // namespace

void quantize_rows(WType type, const float* src, int64_t rows, int64_t cols, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t rb = row_bytes(type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src + r * cols;
    uint8_t* o = out + r * rb;
    switch (type) {
      case WType::F32: std::memcpy(o, x, rb); break;
      case WType::F16:
        for (int64_t i = 0; i < cols; ++i) {
          const uint16_t h = float_to_half(x[i]);
          std::memcpy(o + 2 * i, &h, 2);
        }
        break;
      case WType::BF16:
        for (int64_t i = 0; i < cols; ++i) {
          const uint16_t h = float_to_bf16(x[i]);
          std::memcpy(o + 2 * i, &h, 2);
        }
        break;
      case WType::Q8_0:
        for (int64_t b = 0; b < cols / kQBlock; ++b) quantize_q8_0(x + b * kQBlock, o + b * block_bytes(type));
        break;
      case WType::Q4_0:
        for (int64_t b = 0; b < cols / kQBlock; ++b) quantize_q4_0(x + b * kQBlock, o + b * block_bytes(type));
        break;
      case WType::Q4_K:
      case WType::Q5_K:
      case WType::Q6_K:
      case WType::Q2_K:
      case WType::Q3_K:
        for (int64_t b = 0; b < cols / kSuperBlock; ++b)
          quantize_superblock(type, x + b * kSuperBlock, o + b * superblock_bytes(type));
        break;
    }
  }
}

namespace {

constexpr int64_t quant_bytes(WType t) { return block_bytes(t) - 2; }

// Where block b of row r's scale and quant piece k (4 bytes) lie in a packed
// group, from the group's start.
int64_t packed_scale_at(WType t, int64_t b, int64_t r) { return b * kPackRows * block_bytes(t) + 2 * r; }
int64_t packed_piece_at(WType t, int64_t b, int64_t r, int64_t k) {
  return b * kPackRows * block_bytes(t) + 2 * kPackRows + k * 4 * kPackRows + 4 * r;
}

// Moves one group of 16 rows between the layouts (into `out`).
void regroup(WType t, const uint8_t* in, uint8_t* out, int64_t cols, bool pack) {
  const int64_t rb = row_bytes(t, cols), bb = block_bytes(t), nb = cols / kQBlock;
  for (int64_t r = 0; r < kPackRows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t plain = r * rb + b * bb;
      const int64_t scale = packed_scale_at(t, b, r);
      if (pack)
        std::memcpy(out + scale, in + plain, 2);
      else
        std::memcpy(out + plain, in + scale, 2);
      for (int64_t k = 0; k < quant_bytes(t) / 4; ++k) {
        const int64_t piece = packed_piece_at(t, b, r, k);
        if (pack)
          std::memcpy(out + piece, in + plain + 2 + 4 * k, 4);
        else
          std::memcpy(out + plain + 2 + 4 * k, in + piece, 4);
      }
    }
}

}  // namespace

void regroup_in_place(uint8_t* data, int64_t rows, int64_t group_rows, int64_t row_bytes, std::vector<uint8_t>& scratch,
                      const std::function<void(const uint8_t* in, uint8_t* out)>& regroup) {
  const int64_t group = group_rows * row_bytes;
  scratch.resize(static_cast<size_t>(group));
  for (int64_t g = 0; g + group_rows <= rows; g += group_rows) {
    uint8_t* p = data + g / group_rows * group;
    regroup(p, scratch.data());
    std::memcpy(p, scratch.data(), static_cast<size_t>(group));
  }
}

void pack_rows(WType type, uint8_t* data, int64_t rows, int64_t cols, std::vector<uint8_t>& scratch) {
  if (is_kquant(type)) return kquant_regroup_rows(type, data, rows, cols, scratch, true);
  regroup_in_place(data, rows, kPackRows, row_bytes(type, cols), scratch,
                   [&](const uint8_t* in, uint8_t* out) { regroup(type, in, out, cols, true); });
}

void unpack_rows(WType type, uint8_t* data, int64_t rows, int64_t cols, std::vector<uint8_t>& scratch) {
  if (is_kquant(type)) return kquant_regroup_rows(type, data, rows, cols, scratch, false);
  regroup_in_place(data, rows, kPackRows, row_bytes(type, cols), scratch,
                   [&](const uint8_t* in, uint8_t* out) { regroup(type, in, out, cols, false); });
}

void read_block(const MatrixRef& m, int64_t r, int64_t b, uint8_t* out) {
  const auto* base = static_cast<const uint8_t*>(m.data);
  const int64_t full = m.rows / kPackRows * kPackRows;
  if (!m.packed || r >= full) {
    std::memcpy(out, m.row(r) + b * block_bytes(m.type), static_cast<size_t>(block_bytes(m.type)));
    return;
  }
  const uint8_t* group = base + r / kPackRows * kPackRows * row_bytes(m.type, m.cols);
  const int64_t rr = r % kPackRows;
  std::memcpy(out, group + packed_scale_at(m.type, b, rr), 2);
  for (int64_t k = 0; k < quant_bytes(m.type) / 4; ++k)
    std::memcpy(out + 2 + 4 * k, group + packed_piece_at(m.type, b, rr, k), 4);
}

void dequantize_rows(const MatrixRef& m, int64_t r0, int64_t r1, float* dst) {
  const int64_t cols = m.cols;
  uint8_t block[2 + kQBlock];
  uint8_t super[superblock_bytes(WType::Q6_K)];
  for (int64_t r = r0; r < r1; ++r) {
    float* y = dst + (r - r0) * cols;
    switch (m.type) {
      case WType::F32: std::memcpy(y, m.row(r), cols * sizeof(float)); break;
      case WType::F16:
      case WType::BF16:
        for (int64_t i = 0; i < cols; ++i) {
          uint16_t h;
          std::memcpy(&h, m.row(r) + 2 * i, 2);
          y[i] = m.type == WType::F16 ? half_to_float(h) : bf16_to_float(h);
        }
        break;
      case WType::Q8_0:
        for (int64_t b = 0; b < cols / kQBlock; ++b) {
          read_block(m, r, b, block);
          const float d = block_scale(block);
          for (int i = 0; i < kQBlock; ++i) y[b * kQBlock + i] = d * static_cast<float>(static_cast<int8_t>(block[2 + i]));
        }
        break;
      case WType::Q4_0:
        for (int64_t b = 0; b < cols / kQBlock; ++b) {
          read_block(m, r, b, block);
          const float d = block_scale(block);
          for (int i = 0; i < kQBlock / 2; ++i) {
            y[b * kQBlock + i] = d * static_cast<float>((block[2 + i] & 0x0f) - 8);
            y[b * kQBlock + i + 16] = d * static_cast<float>((block[2 + i] >> 4) - 8);
          }
        }
        break;
      case WType::Q4_K:
      case WType::Q5_K:
      case WType::Q6_K:
      case WType::Q2_K:
      case WType::Q3_K:
        for (int64_t b = 0; b < cols / kSuperBlock; ++b) {
          read_superblock(m, r, b, super);
          dequantize_superblock(m.type, super, y + b * kSuperBlock);
        }
        break;
    }
  }
}

int64_t first_non_finite_row(const MatrixRef& m) {
  std::vector<float> row(static_cast<size_t>(m.cols));
  uint8_t block[2 + kQBlock];
  uint8_t super[superblock_bytes(WType::Q6_K)];
  for (int64_t r = 0; r < m.rows; ++r) {
    if (is_kquant(m.type)) {
      for (int64_t b = 0; b < m.cols / kSuperBlock; ++b) {
        read_superblock(m, r, b, super);
        if (!superblock_scales_finite(m.type, super)) return r;
      }
      continue;
    }
    if (is_quantized(m.type)) {
      for (int64_t b = 0; b < m.cols / kQBlock; ++b) {
        read_block(m, r, b, block);
        if (!std::isfinite(block_scale(block))) return r;
      }
      continue;
    }
    dequantize_rows(m, r, r + 1, row.data());
    for (float v : row)
      if (!std::isfinite(v)) return r;
  }
  return -1;
}

void size_quantized(int64_t rows, int64_t cols, QuantizedRows& out) {
  const int64_t nb = cols / kQBlock;
  out.rows = rows;
  out.cols = cols;
  out.blocks = nb;
  out.q.resize(static_cast<size_t>(rows * cols));
  out.d.resize(static_cast<size_t>(rows * nb));
  out.sum.resize(static_cast<size_t>(rows * nb));
}

void quantize_block(const float* v, int8_t* q, float* d, int32_t* sum) {
  float amax = 0.0f;
  for (int i = 0; i < kQBlock; ++i) amax = std::max(amax, std::fabs(v[i]));
  const float scale = amax / 127.0f;
  const float id = scale != 0.0f ? 1.0f / scale : 0.0f;
  *d = half_to_float(float_to_half(scale));
  int32_t s = 0;
  for (int i = 0; i < kQBlock; ++i) {
    q[i] = static_cast<int8_t>(std::nearbyint(v[i] * id));
    s += q[i];
  }
  *sum = s;
}

void quantize_activations(const float* x, int64_t rows, int64_t cols, QuantizedRows& out) {
  size_quantized(rows, cols, out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < out.blocks; ++b) {
      const int64_t i = r * out.blocks + b;
      quantize_block(x + r * cols + b * kQBlock, out.q.data() + r * cols + b * kQBlock, &out.d[i], &out.sum[i]);
    }
}

}  // namespace splitspec

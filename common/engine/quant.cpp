#include "common/engine/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
    }
  }
}

void dequantize_rows(const MatrixRef& m, int64_t r0, int64_t r1, float* dst) {
  const int64_t cols = m.cols;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = m.row(r);
    float* y = dst + (r - r0) * cols;
    switch (m.type) {
      case WType::F32: std::memcpy(y, row, cols * sizeof(float)); break;
      case WType::F16:
      case WType::BF16:
        for (int64_t i = 0; i < cols; ++i) {
          uint16_t h;
          std::memcpy(&h, row + 2 * i, 2);
          y[i] = m.type == WType::F16 ? half_to_float(h) : bf16_to_float(h);
        }
        break;
      case WType::Q8_0:
        for (int64_t b = 0; b < cols / kQBlock; ++b) {
          const uint8_t* blk = row + b * block_bytes(m.type);
          const float d = block_scale(blk);
          for (int i = 0; i < kQBlock; ++i) y[b * kQBlock + i] = d * static_cast<float>(static_cast<int8_t>(blk[2 + i]));
        }
        break;
      case WType::Q4_0:
        for (int64_t b = 0; b < cols / kQBlock; ++b) {
          const uint8_t* blk = row + b * block_bytes(m.type);
          const float d = block_scale(blk);
          for (int i = 0; i < kQBlock / 2; ++i) {
            y[b * kQBlock + i] = d * static_cast<float>((blk[2 + i] & 0x0f) - 8);
            y[b * kQBlock + i + 16] = d * static_cast<float>((blk[2 + i] >> 4) - 8);
          }
        }
        break;
    }
  }
}

int64_t first_non_finite_row(const MatrixRef& m) {
  std::vector<float> row(static_cast<size_t>(m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    if (is_quantized(m.type)) {
      for (int64_t b = 0; b < m.cols / kQBlock; ++b)
        if (!std::isfinite(block_scale(m.row(r) + b * block_bytes(m.type)))) return r;
      continue;
    }
    dequantize_rows(m, r, r + 1, row.data());
    for (float v : row)
      if (!std::isfinite(v)) return r;
  }
  return -1;
}

void quantize_activations(const float* x, int64_t rows, int64_t cols, int32_t offset, QuantizedRows& out) {
  const int64_t nb = cols / kQBlock;
  out.rows = rows;
  out.cols = cols;
  out.blocks = nb;
  out.q.resize(static_cast<size_t>(rows * cols));
  out.d.resize(static_cast<size_t>(rows * nb));
  out.d8.resize(static_cast<size_t>(rows * nb * 8));
  out.start.resize(static_cast<size_t>(rows * nb * 8));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = x + r * cols + b * kQBlock;
      int8_t* q = out.q.data() + r * cols + b * kQBlock;
      float amax = 0.0f;
      for (int i = 0; i < kQBlock; ++i) amax = std::max(amax, std::fabs(v[i]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      out.d[r * nb + b] = half_to_float(float_to_half(d));
      for (int i = 0; i < kQBlock; ++i) q[i] = static_cast<int8_t>(std::nearbyint(v[i] * id));
      for (int l = 0; l < 8; ++l) {
        out.d8[(r * nb + b) * 8 + l] = out.d[r * nb + b];
        out.start[(r * nb + b) * 8 + l] = -offset * (q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3]);
      }
    }
}

}  // namespace splitspec

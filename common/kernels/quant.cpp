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

void put_half(uint8_t* p, float v) {
  const uint16_t h = float_to_half(v);
  std::memcpy(p, &h, 2);
}

// Weights i and i + 16 of a block's quants, as Q4_0 lays them out; Q5's
// fifth bits into qh (bit i for weight i).
void put_nibbles(const int* q, uint8_t* qs, uint8_t* qh) {
  uint32_t h = 0;
  for (int i = 0; i < kQBlock / 2; ++i) {
    qs[i] = static_cast<uint8_t>((q[i] & 0xF) | ((q[i + 16] & 0xF) << 4));
    h |= static_cast<uint32_t>((q[i] >> 4) & 1) << i;
    h |= static_cast<uint32_t>((q[i + 16] >> 4) & 1) << (i + 16);
  }
  if (qh) std::memcpy(qh, &h, 4);
}

// Q4_1 (top 15) and Q5_1 (top 31): llama.cpp's reference quantizers, d the
// range over `top` and m the least value, q = (x - m) / d + 0.5 truncated.
void quantize_min_block(const float* x, uint8_t* out, int top) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < kQBlock; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float d = (hi - lo) / static_cast<float>(top);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_half(out, d);
  put_half(out + 2, lo);
  int q[kQBlock];
  for (int i = 0; i < kQBlock; ++i) q[i] = std::min(top, static_cast<int>(static_cast<uint8_t>((x[i] - lo) * id + 0.5f)));
  put_nibbles(q, out + (top == 31 ? 8 : 4), top == 31 ? out + 4 : nullptr);
}

// Q5_0: as Q4_0, against 16 levels either side.
void quantize_q5_0(const float* x, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < kQBlock; ++i)
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  const float d = max / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_half(out, d);
  int q[kQBlock];
  for (int i = 0; i < kQBlock; ++i) q[i] = std::min(31, static_cast<int>(static_cast<int8_t>(x[i] * id + 16.5f)));
  put_nibbles(q, out + 6, out + 2);
}

// IQ4_NL: the value of largest magnitude at the grid's end (-127), each
// weight to its nearest grid value, then d refit by least squares. A
// simpler search than llama.cpp's (which tries several scales).
void quantize_iq4_nl(const float* x, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < kQBlock; ++i)
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  const float d0 = max / static_cast<float>(kIq4Values[0]);
  const float id = d0 != 0.0f ? 1.0f / d0 : 0.0f;
  int q[kQBlock];
  float sum_xv = 0.0f, sum_vv = 0.0f;
  for (int i = 0; i < kQBlock; ++i) {
    const float v = x[i] * id;
    int best = 0;
    for (int k = 1; k < 16; ++k)
      if (std::fabs(v - kIq4Values[k]) < std::fabs(v - kIq4Values[best])) best = k;
    q[i] = best;
    sum_xv += x[i] * static_cast<float>(kIq4Values[best]);
    sum_vv += static_cast<float>(kIq4Values[best]) * static_cast<float>(kIq4Values[best]);
  }
  put_half(out, sum_vv > 0.0f ? sum_xv / sum_vv : 0.0f);
  put_nibbles(q, out + 2, nullptr);
}

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

}  // namespace

void block_quants(WType t, const uint8_t* block, int8_t* q) {
  if (t == WType::Q8_0) {
    std::memcpy(q, block + 2, kQBlock);
    return;
  }
  const uint8_t* qs = block + block_bytes(t) - kQBlock / 2;
  uint32_t qh = 0;
  if (block_has_high_bits(t)) std::memcpy(&qh, block + (block_has_min(t) ? 4 : 2), 4);
  for (int i = 0; i < kQBlock; ++i) {
    int v = (i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4) | static_cast<int>(((qh >> i) & 1) << 4);
    if (t == WType::Q4_0) v -= 8;
    if (t == WType::Q5_0) v -= 16;
    if (t == WType::IQ4_NL) v = kIq4Values[v];
    q[i] = static_cast<int8_t>(v);
  }
}

float block_d(const uint8_t* block) { return half_at(block); }
float block_m(const uint8_t* block) { return half_at(block + 2); }

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
      case WType::Q4_1:
      case WType::Q5_0:
      case WType::Q5_1:
      case WType::IQ4_NL:
        for (int64_t b = 0; b < cols / kQBlock; ++b) {
          const float* xb = x + b * kQBlock;
          uint8_t* ob = o + b * block_bytes(type);
          if (type == WType::Q4_0) quantize_q4_0(xb, ob);
          if (type == WType::Q4_1) quantize_min_block(xb, ob, 15);
          if (type == WType::Q5_1) quantize_min_block(xb, ob, 31);
          if (type == WType::Q5_0) quantize_q5_0(xb, ob);
          if (type == WType::IQ4_NL) quantize_iq4_nl(xb, ob);
        }
        break;
      case WType::Q4_K:
      case WType::Q5_K:
      case WType::Q6_K:
      case WType::Q2_K:
      case WType::Q3_K:
      case WType::IQ4_XS:
        for (int64_t b = 0; b < cols / kSuperBlock; ++b)
          quantize_superblock(type, x + b * kSuperBlock, o + b * superblock_bytes(type));
        break;
    }
  }
}

namespace {

// A block's header fields (d, then m, then qh, as the type has them): each
// field of the 16 rows lies side by side in a packed group (weight_type.h).
struct Field {
  int64_t at, size;  // in the block
};
int fields(WType t, Field out[3]) {
  int n = 0;
  out[n++] = {0, 2};
  if (block_has_min(t)) out[n++] = {2, 2};
  if (block_has_high_bits(t)) out[n++] = {block_has_min(t) ? 4 : 2, 4};
  return n;
}
int64_t header_bytes(WType t) { return block_bytes(t) - block_quant_bytes(t); }

// Where field f (of `field`) and quant piece k (4 bytes) of row r lie in a
// packed group's block.
int64_t packed_field_at(const Field& f, int64_t r) { return kPackRows * f.at + f.size * r; }
int64_t packed_piece_at(WType t, int64_t r, int64_t k) {
  return kPackRows * header_bytes(t) + k * 4 * kPackRows + 4 * r;
}

// One block between its plain bytes and a packed group's block: pack, from
// the block at `src` into the packed one at `dst`; else from the packed
// block at `src` into the block at `dst`.
void move_block(WType t, const uint8_t* src, uint8_t* dst, int64_t r, bool pack) {
  auto move = [&](int64_t plain_at, int64_t packed_at, int64_t size, uint32_t (*reorder)(uint32_t)) {
    const int64_t from = pack ? plain_at : packed_at, to = pack ? packed_at : plain_at;
    if (!reorder) return static_cast<void>(std::memcpy(dst + to, src + from, static_cast<size_t>(size)));
    uint32_t v;
    std::memcpy(&v, src + from, 4);
    v = reorder(v);
    std::memcpy(dst + to, &v, 4);
  };
  Field f[3];
  const int n = fields(t, f);
  for (int i = 0; i < n; ++i)
    move(f[i].at, packed_field_at(f[i], r), f[i].size, f[i].size == 4 ? (pack ? packed_qh : plain_qh) : nullptr);
  for (int64_t k = 0; k < block_quant_bytes(t) / 4; ++k) move(header_bytes(t) + 4 * k, packed_piece_at(t, r, k), 4, nullptr);
}

// Moves `groups` (1, or 2: a pair) groups of 16 rows between the layouts
// (into `out`).
void regroup(WType t, const uint8_t* in, uint8_t* out, int64_t cols, int64_t groups, bool pack) {
  const int64_t rb = row_bytes(t, cols), bb = block_bytes(t), nb = cols / kQBlock;
  const int64_t rows = groups * kPackRows;
  const uint8_t* packed = pack ? out : in;
  for (int64_t r = 0; r < rows; ++r) {
    const PackedBlocks pb = packed_blocks(t, packed, rows, cols, r / kPackRows * kPackRows);
    const int64_t at = pb.first - packed;
    for (int64_t b = 0; b < nb; ++b) {
      if (pack)
        move_block(t, in + r * rb + b * bb, out + at + b * pb.stride, r % kPackRows, true);
      else
        move_block(t, in + at + b * pb.stride, out + r * rb + b * bb, r % kPackRows, false);
    }
  }
}

// The pairs of groups, then a last odd group.
void regroup_rows(WType t, uint8_t* data, int64_t rows, int64_t cols, std::vector<uint8_t>& scratch, bool pack) {
  const int64_t rb = row_bytes(t, cols), paired = rows / kPairRows * kPairRows;
  regroup_in_place(data, paired, kPairRows, rb, scratch,
                   [&](const uint8_t* in, uint8_t* out) { regroup(t, in, out, cols, 2, pack); });
  regroup_in_place(data + paired * rb, rows - paired, kPackRows, rb, scratch,
                   [&](const uint8_t* in, uint8_t* out) { regroup(t, in, out, cols, 1, pack); });
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
  regroup_rows(type, data, rows, cols, scratch, true);
}

void unpack_rows(WType type, uint8_t* data, int64_t rows, int64_t cols, std::vector<uint8_t>& scratch) {
  if (is_kquant(type)) return kquant_regroup_rows(type, data, rows, cols, scratch, false);
  regroup_rows(type, data, rows, cols, scratch, false);
}

void read_block(const MatrixRef& m, int64_t r, int64_t b, uint8_t* out) {
  const int64_t full = m.rows / kPackRows * kPackRows;
  if (!m.packed || r >= full) {
    std::memcpy(out, m.row(r) + b * block_bytes(m.type), static_cast<size_t>(block_bytes(m.type)));
    return;
  }
  move_block(m.type, packed_blocks(m, r / kPackRows * kPackRows).block(b), out, r % kPackRows, false);
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
      case WType::Q4_0:
      case WType::Q4_1:
      case WType::Q5_0:
      case WType::Q5_1:
      case WType::IQ4_NL:
        for (int64_t b = 0; b < cols / kQBlock; ++b) {
          read_block(m, r, b, block);
          int8_t q[kQBlock];
          block_quants(m.type, block, q);
          const float d = block_d(block), mn = block_has_min(m.type) ? block_m(block) : 0.0f;
          // As llama.cpp's dequantize_row_*: d * q, plus m where there is one.
          for (int i = 0; i < kQBlock; ++i)
            y[b * kQBlock + i] = block_has_min(m.type) ? d * static_cast<float>(q[i]) + mn : d * static_cast<float>(q[i]);
        }
        break;
      case WType::Q4_K:
      case WType::Q5_K:
      case WType::Q6_K:
      case WType::Q2_K:
      case WType::Q3_K:
      case WType::IQ4_XS:
        for (int64_t b = 0; b < cols / kSuperBlock; ++b) {
          read_superblock(m, r, b, super);
          dequantize_superblock(m.type, super, y + b * kSuperBlock);
        }
        break;
    }
  }
}

std::vector<float> dequantize_all(const MatrixRef& m) {
  std::vector<float> v(static_cast<size_t>(m.rows * m.cols));
  dequantize_rows(m, 0, m.rows, v.data());
  return v;
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
        if (!std::isfinite(block_d(block)) || (block_has_min(m.type) && !std::isfinite(block_m(block)))) return r;
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
  out.s.resize(static_cast<size_t>(rows * nb));
}

void quantize_block(const float* v, int8_t* q, float* d, int32_t* sum, float* s_out) {
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
  *s_out = half_to_float(float_to_half(scale * static_cast<float>(s)));
}

void quantize_activations(const float* x, int64_t rows, int64_t cols, QuantizedRows& out) {
  size_quantized(rows, cols, out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < out.blocks; ++b) {
      const int64_t i = r * out.blocks + b;
      quantize_block(x + r * cols + b * kQBlock, out.q.data() + r * cols + b * kQBlock, &out.d[i], &out.sum[i],
                     &out.s[i]);
    }
}

}  // namespace splitspec

// The 32-weight block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) as
// llama.cpp stores them: our quantizers within a step of the values, the
// packed layout a permutation of each group's bytes (Q5's qh bits reordered
// and back), and the weights as llama.cpp's dequantize_row_* gives them.
// Every body against the reference, bit for bit: linear_check. Agreement
// with llama.cpp on files its quantizer wrote: tests/families/families_test.py
// --fallback-types.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/kernels/linear.h"
#include "common/kernels/quant.h"

namespace splitspec::test {
namespace {

constexpr WType kBlockTypes[] = {WType::Q8_0, WType::Q4_0, WType::Q4_1, WType::Q5_0, WType::Q5_1, WType::IQ4_NL};

// Each weight within a step of its block's grid: Q8_0's amax / 127, Q4_0's
// and Q5_0's amax / 8 and / 16, Q4_1's and Q5_1's range / 15 and / 31 (the
// scales rounded to half precision), IQ4_NL's widest gap (24 of 127 amax).
TEST(BlockQuant, QuantizersStayWithinAStep) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (WType t : kBlockTypes) {
    SCOPED_TRACE(wtype_name(t));
    for (int trial = 0; trial < 200; ++trial) {
      float x[kQBlock], y[kQBlock];
      for (float& v : x) v = normal(rng) * (trial % 5 == 0 ? 10.0f : 1.0f) + (trial % 7 == 0 ? 0.05f : 0.0f);
      if (trial == 1) std::fill(x, x + kQBlock, 0.0f);
      if (trial == 2) std::fill(x, x + kQBlock, 0.5f);
      std::vector<uint8_t> b(static_cast<size_t>(block_bytes(t)));
      quantize_rows(t, x, 1, kQBlock, b.data());
      dequantize_rows(MatrixRef{t, b.data(), 1, kQBlock}, 0, 1, y);
      float amax = 0.0f, lo = x[0], hi = x[0];
      for (float v : x) {
        amax = std::max(amax, std::fabs(v));
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      const float step = t == WType::Q8_0   ? amax / 127
                         : t == WType::Q4_0 ? amax / 8
                         : t == WType::Q5_0 ? amax / 16
                         : t == WType::Q4_1 ? (hi - lo) / 15
                         : t == WType::Q5_1 ? (hi - lo) / 31
                                            : 24 * amax / 127;
      for (int i = 0; i < kQBlock; ++i)
        EXPECT_LE(std::fabs(x[i] - y[i]), step * 1.01f + 1e-6f) << "trial " << trial << " weight " << i;
    }
  }
}

// A hand-made block of each type decodes as llama.cpp's dequantize_row_*
// says: Q5_0's fifth bits from qh bit i for weight i, Q4_1/Q5_1's d * q + m,
// IQ4_NL's grid.
TEST(BlockQuant, BlocksDecodeAsLlamaCppLaysThemOut) {
  uint8_t b[24] = {};
  const uint16_t d = float_to_half(0.5f), m = float_to_half(-1.0f);
  // Q5_0: d, qh, then byte i holding weights i (low) and i + 16 (high).
  std::memcpy(b, &d, 2);
  const uint32_t qh = (1u << 3) | (1u << 20);
  std::memcpy(b + 2, &qh, 4);
  for (int i = 0; i < 16; ++i) b[6 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  float y[kQBlock];
  dequantize_rows(MatrixRef{WType::Q5_0, b, 1, kQBlock}, 0, 1, y);
  EXPECT_EQ(y[0], 0.5f * (0 - 16));
  EXPECT_EQ(y[3], 0.5f * (3 + 16 - 16));
  EXPECT_EQ(y[20], 0.5f * ((15 - 4) + 16 - 16));
  EXPECT_EQ(y[21], 0.5f * ((15 - 5) - 16));
  // Q5_1: d, m, qh, quants.
  std::memcpy(b + 2, &m, 2);
  std::memcpy(b + 4, &qh, 4);
  for (int i = 0; i < 16; ++i) b[8 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  dequantize_rows(MatrixRef{WType::Q5_1, b, 1, kQBlock}, 0, 1, y);
  EXPECT_EQ(y[3], 0.5f * 19 - 1.0f);
  EXPECT_EQ(y[20], 0.5f * 27 - 1.0f);
  EXPECT_EQ(y[31], 0.5f * 0 - 1.0f);
  // IQ4_NL: d, then nibbles into the grid.
  for (int i = 0; i < 16; ++i) b[2 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  dequantize_rows(MatrixRef{WType::IQ4_NL, b, 1, kQBlock}, 0, 1, y);
  EXPECT_EQ(y[0], 0.5f * -127);
  EXPECT_EQ(y[15], 0.5f * 113);
  EXPECT_EQ(y[16], 0.5f * 113);
}

// Packing is a permutation: packing and unpacking give the file's bytes
// back, every block reads back as stored, and a packed matrix (tail rows
// past the last whole group included) dequantizes and multiplies exactly as
// the plain one.
TEST(BlockQuant, PackedRowsAreThePlainRowsRegrouped) {
  for (WType t : kBlockTypes) {
    SCOPED_TRACE(wtype_name(t));
    const int64_t rows = 2 * kPackRows + 5, cols = 576, n = 3;
    std::vector<uint8_t> plain(static_cast<size_t>(rows * row_bytes(t, cols)));
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    std::vector<float> wf(static_cast<size_t>(rows * cols));
    for (float& v : wf) v = normal(rng) * 0.1f;
    quantize_rows(t, wf.data(), rows, cols, plain.data());
    std::vector<uint8_t> packed = plain, scratch;
    pack_rows(t, packed.data(), rows, cols, scratch);
    EXPECT_NE(packed, plain);
    std::vector<uint8_t> back = packed;
    unpack_rows(t, back.data(), rows, cols, scratch);
    EXPECT_EQ(back, plain);
    const MatrixRef p{t, packed.data(), rows, cols, true}, w{t, plain.data(), rows, cols};
    std::vector<uint8_t> block(static_cast<size_t>(block_bytes(t)));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < cols / kQBlock; ++b) {
        read_block(p, r, b, block.data());
        ASSERT_EQ(std::memcmp(block.data(), w.row(r) + b * block_bytes(t), block.size()), 0) << r << " " << b;
      }
    std::vector<float> a(wf.size()), c(wf.size());
    dequantize_rows(w, 0, rows, a.data());
    dequantize_rows(p, 0, rows, c.data());
    EXPECT_EQ(a, c);
    std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows)), z(y.size());
    for (float& v : x) v = normal(rng);
    kernels::linear_reference(x.data(), n, w, y.data());
    kernels::linear(x.data(), n, p, z.data());
    EXPECT_EQ(std::memcmp(y.data(), z.data(), y.size() * sizeof(float)), 0);
  }
}

// packed_qh and plain_qh are inverses, and put each piece's fifth bits where
// the bodies' shift and mask find them.
TEST(BlockQuant, PackedQhPutsEachPiecesFifthBitsInReach) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 1000; ++trial) {
    const uint32_t qh = static_cast<uint32_t>(rng());
    const uint32_t p = packed_qh(qh);
    ASSERT_EQ(plain_qh(p), qh);
    for (int k = 0; k < 4; ++k) {
      const uint32_t lo = (p << (4 - k)) & 0x10101010u, hi = (p >> k) & 0x10101010u;
      for (int b = 0; b < 4; ++b) {
        EXPECT_EQ((lo >> (8 * b + 4)) & 1, (qh >> (4 * k + b)) & 1);
        EXPECT_EQ((hi >> (8 * b + 4)) & 1, (qh >> (16 + 4 * k + b)) & 1);
      }
    }
  }
}

}  // namespace
}  // namespace splitspec::test

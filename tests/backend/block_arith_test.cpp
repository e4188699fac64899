// The GPU's per-block arithmetic (common/backend/cuda/block_arith.h) against
// the CPU's own code, on the CPU: every half, the activations' quantizers,
// whole rows of quantized products against linear_reference, dequantized
// values and our quantizer's bytes. The GPU runs these same functions, so a
// match here is half of its bit-for-bit match (the other half, its integer
// sums, is exact in any order; scripts/gpu_check.sh checks the whole).
#include "common/backend/cuda/block_arith.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/kernels/kquant.h"
#include "common/kernels/linear.h"
#include "common/kernels/quant.h"
#include "common/kernels/weight_type.h"

namespace splitspec {
namespace {

uint32_t bits(float f) { return blocks::float_bits(f); }

std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  // Some exact zeros, repeated magnitudes and outliers: the branches.
  for (size_t i = 0; i < n; i += 97) v[i] = 0.0f;
  for (size_t i = 5; i < n; i += 131) v[i] = -v[i - 1];
  for (size_t i = 11; i < n; i += 509) v[i] *= 40.0f;
  return v;
}

TEST(BlockArith, HalvesConvertAsTheCpuDoes) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = half_to_float(static_cast<uint16_t>(h)), got = blocks::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
      continue;
    }
    ASSERT_EQ(bits(got), bits(want)) << h;
  }
  std::mt19937 rng(3);
  std::vector<float> probes = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e6f, -1e6f, 5.96e-8f, 2.98e-8f,
                               2.99e-8f, 6.1e-5f, 6.09e-5f, 1e-10f, INFINITY, -INFINITY};
  for (int i = 0; i < 2000000; ++i) {
    // Every exponent a half can reach, and past both ends.
    const uint32_t u = (rng() & 0x807fffffu) | (static_cast<uint32_t>(96 + rng() % 64) << 23);
    probes.push_back(blocks::bits_float(u));
  }
  for (float f : probes) ASSERT_EQ(blocks::float_to_half(f), float_to_half(f)) << f;
  for (float f : probes) ASSERT_EQ(blocks::float_to_bf16(f), float_to_bf16(f)) << f;
}

TEST(BlockArith, ActivationQuantizersAreTheCpus) {
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const std::vector<float> x = random_floats(1024, seed, seed % 2 ? 1.0f : 1e-3f);
    QuantizedRows q8;
    quantize_activations(x.data(), 1, 1024, q8);
    for (int b = 0; b < 32; ++b) {
      int8_t q[32];
      float d;
      int32_t sum;
      blocks::quantize_q8_block(x.data() + 32 * b, q, &d, &sum);
      ASSERT_EQ(bits(d), bits(q8.d[b])) << seed << " " << b;
      ASSERT_EQ(sum, q8.sum[b]);
      for (int i = 0; i < 32; ++i) ASSERT_EQ(q[i], q8.q[32 * b + i]);
    }
    Q8KRows q8k;
    quantize_q8k(x.data(), 1, 1024, q8k);
    for (int b = 0; b < 4; ++b) {
      int8_t q[256];
      float d;
      int16_t bsums[16];
      blocks::quantize_q8k_block(x.data() + 256 * b, q, &d, bsums);
      ASSERT_EQ(bits(d), bits(q8k.d[b])) << seed << " " << b;
      for (int i = 0; i < 256; ++i) ASSERT_EQ(q[i], q8k.q[256 * b + i]);
      for (int g = 0; g < 16; ++g) ASSERT_EQ(bsums[g], q8k.bsums[16 * b + g]);
    }
  }
  // An all-zero super-block.
  const std::vector<float> zeros(256, 0.0f);
  int8_t q[256];
  float d = 1.0f;
  int16_t bsums[16];
  blocks::quantize_q8k_block(zeros.data(), q, &d, bsums);
  EXPECT_EQ(d, 0.0f);
}

// A whole row's product, block by block with these functions, is the CPU
// reference's output bit for bit.
float row_product(WType t, const uint8_t* row, int64_t cols, const float* x) {
  float acc = 0.0f;
  if (t == WType::Q8_0) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      int8_t q[32];
      float dx;
      int32_t sum;
      blocks::quantize_q8_block(x + 32 * b, q, &dx, &sum);
      const uint8_t* blk = row + 34 * b;
      const float dw = blocks::get_half(blk);
      acc = blocks::q8_0_accumulate(acc, blocks::q8_0_sumi(reinterpret_cast<const int8_t*>(blk + 2), q), dw, dx);
    }
    return acc;
  }
  for (int64_t b = 0; b < cols / 256; ++b) {
    int8_t q[256];
    float dx;
    int16_t bsums[16];
    blocks::quantize_q8k_block(x + 256 * b, q, &dx, bsums);
    if (t == WType::Q4_K) {
      const uint8_t* blk = row + 144 * b;
      acc = blocks::kquant_accumulate_mins(acc, blocks::q4k_sumi(blk + 4, blk + 16, q), blocks::q4k_summ(blk + 4, bsums),
                                           blocks::get_half(blk), blocks::get_half(blk + 2), dx);
    } else {
      const uint8_t* blk = row + 210 * b;
      acc = blocks::kquant_accumulate(
          acc, blocks::q6k_sumi(blk, blk + 128, reinterpret_cast<const int8_t*>(blk + 192), q), blocks::get_half(blk + 208),
          dx);
    }
  }
  return acc;
}

TEST(BlockArith, RowProductsAreTheCpuReference) {
  for (WType t : {WType::Q8_0, WType::Q4_K, WType::Q6_K}) {
    for (int64_t cols : {256, 768, 2048}) {
      const int64_t rows = 24, n = 5;
      const std::vector<float> w = random_floats(static_cast<size_t>(rows * cols), 7 + cols, 0.05f);
      const std::vector<float> x = random_floats(static_cast<size_t>(n * cols), 9 + cols, 2.0f);
      std::vector<uint8_t> stored(static_cast<size_t>(rows * row_bytes(t, cols)));
      quantize_rows(t, w.data(), rows, cols, stored.data());
      const MatrixRef m{t, stored.data(), rows, cols, false};
      std::vector<float> want(static_cast<size_t>(n * rows));
      kernels::linear_reference(x.data(), n, m, want.data());
      for (int64_t j = 0; j < n; ++j)
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(bits(row_product(t, m.row(r), cols, x.data() + j * cols)), bits(want[j * rows + r]))
              << wtype_name(t) << " cols " << cols << " row " << r << " input " << j;
    }
  }
}

TEST(BlockArith, DequantizedValuesAreTheCpus) {
  const int64_t cols = 512;
  const std::vector<float> w = random_floats(static_cast<size_t>(4 * cols), 21, 0.3f);
  for (WType t : {WType::Q8_0, WType::Q4_K, WType::Q6_K}) {
    std::vector<uint8_t> stored(static_cast<size_t>(4 * row_bytes(t, cols)));
    quantize_rows(t, w.data(), 4, cols, stored.data());
    const MatrixRef m{t, stored.data(), 4, cols, false};
    std::vector<float> want(static_cast<size_t>(4 * cols));
    dequantize_rows(m, 0, 4, want.data());
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t i = 0; i < cols; ++i) {
        const uint8_t* row = m.row(r);
        float got = 0.0f;
        if (t == WType::Q8_0) {
          got = blocks::q8_0_value(blocks::get_half(row + 34 * (i / 32)), static_cast<int8_t>(row[34 * (i / 32) + 2 + i % 32]));
        } else if (t == WType::Q4_K) {
          const uint8_t* b = row + 144 * (i / 256);
          got = blocks::q4k_value(blocks::get_half(b), blocks::get_half(b + 2), b + 4, b + 16, static_cast<int>(i % 256));
        } else {
          const uint8_t* b = row + 210 * (i / 256);
          got = blocks::q6k_value(blocks::get_half(b + 208), reinterpret_cast<const int8_t*>(b + 192), b, b + 128,
                                  static_cast<int>(i % 256));
        }
        ASSERT_EQ(bits(got), bits(want[r * cols + i])) << wtype_name(t) << " " << r << " " << i;
      }
  }
}

TEST(BlockArith, OurQuantizerWritesTheCpusBytes) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const std::vector<float> x = random_floats(256, 100 + seed, seed % 3 == 0 ? 1e-4f : 0.7f);
    uint8_t want[210], got[210];
    quantize_superblock(WType::Q4_K, x.data(), want);
    blocks::quantize_q4k(x.data(), got);
    ASSERT_EQ(std::vector<uint8_t>(want, want + 144), std::vector<uint8_t>(got, got + 144)) << seed;
    quantize_superblock(WType::Q6_K, x.data(), want);
    blocks::quantize_q6k(x.data(), got);
    ASSERT_EQ(std::vector<uint8_t>(want, want + 210), std::vector<uint8_t>(got, got + 210)) << seed;
  }
  const std::vector<float> zeros(256, 0.0f);
  uint8_t want[210], got[210];
  quantize_superblock(WType::Q6_K, zeros.data(), want);
  blocks::quantize_q6k(zeros.data(), got);
  EXPECT_EQ(std::vector<uint8_t>(want, want + 210), std::vector<uint8_t>(got, got + 210));
}

}  // namespace
}  // namespace splitspec

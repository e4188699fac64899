// The GPU kernels' split of a block among lanes, run lane by lane on the
// CPU: the lanes' shares add up to the block's integer sums, and the
// tensor-core fragment layouts place every weight and input where the
// fragment that reads it expects (common/backend/cuda/warp_math.h).
#include "common/backend/cuda/warp_math.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "common/kernels/kquant.h"
#include "common/kernels/quant.h"
#include "common/kernels/weight_type.h"

namespace splitspec {
namespace {

std::vector<float> normals(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(WarpMath, LaneSharesAddUpToTheBlocksSums) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const std::vector<float> w = normals(256, seed, 0.1f), x = normals(256, 1000 + seed, 1.5f);
    int8_t xq[256];
    float dx;
    int16_t bsums[16];
    blocks::quantize_q8k_block(x.data(), xq, &dx, bsums);

    uint8_t q4[144];
    quantize_superblock(WType::Q4_K, w.data(), q4);
    int32_t sumi = 0, summ = 0;
    for (int p = 0; p < blocks::kKLanesPerBlock; ++p) {
      sumi += blocks::q4k_lane_sumi(p, q4 + 16, q4 + 4, xq);
      summ += blocks::q4k_lane_summ(p, q4 + 4, bsums);
    }
    EXPECT_EQ(sumi, blocks::q4k_sumi(q4 + 4, q4 + 16, xq)) << seed;
    EXPECT_EQ(summ, blocks::q4k_summ(q4 + 4, bsums)) << seed;

    uint8_t q6[210];
    quantize_superblock(WType::Q6_K, w.data(), q6);
    const auto* sc6 = reinterpret_cast<const int8_t*>(q6 + 192);
    sumi = 0;
    for (int p = 0; p < blocks::kKLanesPerBlock; ++p) sumi += blocks::q6k_lane_sumi(p, q6, sc6, xq);
    EXPECT_EQ(sumi, blocks::q6k_sumi(q6, q6 + 128, sc6, xq)) << seed;

    std::vector<uint8_t> q8(34);
    quantize_rows(WType::Q8_0, w.data(), 1, 32, q8.data());
    int8_t xq8[32];
    float d8;
    int32_t s8;
    blocks::quantize_q8_block(x.data(), xq8, &d8, &s8);
    const auto* wq = reinterpret_cast<const int8_t*>(q8.data() + 2);
    EXPECT_EQ(blocks::q8_0_lane_sum(0, wq, xq8) + blocks::q8_0_lane_sum(1, wq, xq8), blocks::q8_0_sumi(wq, xq8));
  }
}

// The int8 fragments' words hold the sub-blocks' quants in position order.
TEST(WarpMath, KQuantFragmentWordsHoldTheQuantsInOrder) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> w = normals(256, 50 + seed, 0.2f);
    uint8_t q4[144], q6[210];
    quantize_superblock(WType::Q4_K, w.data(), q4);
    quantize_superblock(WType::Q6_K, w.data(), q6);
    for (int s = 0; s < 8; ++s)
      for (int k = 0; k < 32; ++k) {
        const uint32_t word = blocks::q4k_fragment_word(q4 + 16, s, k - k % 4);
        ASSERT_EQ(static_cast<int>((word >> (8 * (k % 4))) & 0xff), blocks::q4k_quant(q4 + 16, 32 * s + k)) << s << " " << k;
      }
    for (int s = 0; s < 16; ++s)
      for (int k = 0; k < 16; ++k) {
        const uint32_t word = blocks::q6k_fragment_word(q6, s, k - k % 4);
        ASSERT_EQ(static_cast<int8_t>((word >> (8 * (k % 4))) & 0xff), blocks::q6k_quant(q6, q6 + 128, 16 * s + k))
            << s << " " << k;
      }
  }
}

// Every (lane, element) of a fragment names one tile position, each position
// once, and tiled_offset finds it again.
TEST(WarpMath, FragmentLayoutsAreOneToOne) {
  std::set<std::pair<int, int>> a, b, c;
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const int row = blocks::a_row(lane, i), k = blocks::a_k(lane, i);
      ASSERT_TRUE(row >= 0 && row < 16 && k >= 0 && k < 16);
      a.insert({row, k});
      int l2, i2;
      blocks::a_position(row, k, &l2, &i2);
      EXPECT_EQ(l2, lane);
      EXPECT_EQ(i2, i);
      EXPECT_EQ(blocks::tiled_offset(16 * 3 + row, 16 * 2 + k, 80), (3 * 5 + 2) * 256 + lane * 8 + i);
    }
    for (int i = 0; i < 4; ++i) {
      const int k = blocks::b_k(lane, i), n = blocks::b_n(lane, i);
      b.insert({k, n});
      EXPECT_EQ(blocks::b_tiled_offset(8 * 2 + n, 16 + k, 40), (2 * 3 + 1) * 128 + lane * 4 + i);
      c.insert({blocks::c_row(lane, i), blocks::c_n(lane, i)});
    }
  }
  EXPECT_EQ(a.size(), 256u);
  EXPECT_EQ(b.size(), 128u);
  EXPECT_EQ(c.size(), 128u);
}

// What a warp's mma computes from tiles laid out by tiled_offset and
// b_tiled_offset, element by element as the fragments say, is W . x.
TEST(WarpMath, TiledOperandsMultiplyToTheProduct) {
  const int rows = 16, cols = 32, n = 8;
  const std::vector<float> w = normals(rows * cols, 1, 1.0f), x = normals(n * cols, 2, 1.0f);
  std::vector<float> wt(2 * 256, 0.0f), xt(2 * 128, 0.0f);
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < cols; ++k) wt[blocks::tiled_offset(r, k, cols)] = w[r * cols + k];
  for (int j = 0; j < n; ++j)
    for (int k = 0; k < cols; ++k) xt[blocks::b_tiled_offset(j, k, cols)] = x[j * cols + k];
  double d[16][8] = {};
  for (int s = 0; s < 2; ++s) {
    // The fragments as the lanes hold them, then the product they define.
    float A[16][16], B[16][8];
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 8; ++i) A[blocks::a_row(lane, i)][blocks::a_k(lane, i)] = wt[s * 256 + lane * 8 + i];
      for (int i = 0; i < 4; ++i) B[blocks::b_k(lane, i)][blocks::b_n(lane, i)] = xt[s * 128 + lane * 4 + i];
    }
    for (int r = 0; r < 16; ++r)
      for (int j = 0; j < 8; ++j)
        for (int k = 0; k < 16; ++k) d[r][j] += static_cast<double>(A[r][k]) * B[k][j];
  }
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < n; ++j) {
      double want = 0;
      for (int k = 0; k < cols; ++k) want += static_cast<double>(w[r * cols + k]) * x[j * cols + k];
      EXPECT_NEAR(d[r][j], want, 1e-9) << r << " " << j;
    }
}

}  // namespace
}  // namespace splitspec

// Batch invariance of the forward kernels: a row's result must be bitwise the
// same whether it is computed alone or with others, since exact greedy
// speculative decoding relies on it. Runs on whichever path this CPU uses;
// the ctest entries with SPLITSPEC_KERNELS=scalar cover the portable one.
#include "common/kernels/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "common/decoding/token_tree.h"
#include "common/kernels/parallel.h"
#include "common/kernels/quant.h"
#include "common/kernels/threads.h"
#if defined(__x86_64__)
#include "common/kernels/kernels_avx2.h"
#endif
#include "common/model/model.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

// x [n, in] times w [out, in] transposed, by the kernel.
Rows kernel_linear(const std::vector<float>& x, int64_t n, const std::vector<float>& w, int64_t out, int64_t in) {
  Rows y(n, out);
  kernels::linear(x.data(), n, MatrixRef{WType::F32, w.data(), out, in}, y.data());
  return y;
}

}  // namespace

TEST(Kernels, LinearMatchesTheReferenceAndIsBatchInvariant) {
  std::cout << "[ kernels: " << kernels::isa() << " ]\n";
  // Input widths around the 8-lane vectors and the 768-wide k-blocks; output
  // counts that leave partial row blocks.
  for (int64_t in : {1, 7, 8, 64, 172, 768, 1000, 1728}) {
    for (int64_t out : {1, 5, 13, 50}) {
      const std::vector<float> w = randn(out * in, in * 100 + out), x = randn(11 * in, in + out);
      const Rows all = kernel_linear(x, 11, w, out, in);
      const std::vector<float> want = reference_linear(x.data(), 11, w.data(), out, in);
      EXPECT_TRUE(all_close(all, RowsView{want.data(), 11, out}, 1e-4, 1e-4)) << in << "x" << out;
      for (int64_t n : {1, 2, 3, 4, 5, 8}) {
        EXPECT_TRUE(same_values(kernel_linear(x, n, w, out, in), all.view().slice(0, n)))
            << "in " << in << " out " << out << " rows " << n;
      }
    }
  }
}

TEST(Kernels, LinearIndependentOfThreadCount) {
  const std::vector<float> w = randn(301 * 1000, 1), x = randn(6 * 1000, 2);
  const int before = compute_threads();
  set_compute_threads(1);
  const Rows one = kernel_linear(x, 6, w, 301, 1000);
  set_compute_threads(2);
  const Rows two = kernel_linear(x, 6, w, 301, 1000);
  set_compute_threads(before);
  EXPECT_TRUE(same_values(one, two));
}

// A forward gets the threads its work is worth, never more than the
// caller's, and the caller's count is back afterwards.
TEST(Kernels, AForwardsThreadsFollowItsWork) {
  const int before = compute_threads();
  set_compute_threads(2);
  EXPECT_EQ(kernels::threads_for(1'400'000), 1) << "the demo draft's step";
  EXPECT_EQ(kernels::threads_for(2 * 1'400'000), 1);
  EXPECT_EQ(kernels::threads_for(8'200'000), 2) << "the demo target's step";
  EXPECT_EQ(kernels::threads_for(2 * kernels::kMacsPerThread), 2);
  EXPECT_EQ(kernels::threads_for(int64_t{1} << 40), 2) << "never past the caller's count";
  {
    const kernels::ScopedThreads one(1);
    EXPECT_EQ(compute_threads(), 1);
  }
  EXPECT_EQ(compute_threads(), 2);
  set_compute_threads(before);
}

TEST(Kernels, AttentionRowDependsOnlyOnItsVisibleSlots) {
  const int64_t D = 64, cap = 40, kvh = 2, qh = 4;
  const std::vector<float> k = randn(kvh * cap * D, 3), v = randn(kvh * cap * D, 4), q = randn(5 * qh * D, 5);
  const std::vector<std::vector<int32_t>> visible = {{0, 1, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {0, 3, 7}, {1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33}};
  Rows all(5, qh * D);
  kernels::attention(q.data(), k.data(), v.data(), {5, qh, kvh, D, cap * D}, visible, 0.125f, all.data());
  for (int64_t i = 0; i < 5; ++i) {
    Rows one(1, qh * D);
    kernels::attention(q.data() + i * qh * D, k.data(), v.data(), {1, qh, kvh, D, cap * D}, {visible[i]}, 0.125f,
                       one.data());
    EXPECT_TRUE(same_values(one, all.view().slice(i, 1))) << "row " << i;
    // Against a plain softmax attention over the same slots.
    for (int64_t h = 0; h < qh; ++h) {
      const int64_t kv = (h / 2) * cap * D;
      const std::vector<float> ref =
          reference_attention(q.data() + (i * qh + h) * D, k.data() + kv, v.data() + kv, D, visible[i], 0.125);
      EXPECT_TRUE(all_close(RowsView{all.row(i) + h * D, 1, D}, as_row(ref), 1e-4, 1e-5)) << i << "," << h;
    }
  }
}

// The vector conversion (F16C) rounds as the portable one does, ties to
// even, through subnormals and overflow, so an F16 cache holds the same
// bits on every machine.
TEST(Kernels, FloatToHalfMatchesThePortableConversionEverywhere) {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 2049.0f, 2051.0f, 65504.0f, 65519.0f,
                          65520.0f, 1e10f, -1e10f, 0x1p-24f, 0x1p-25f, 0x3p-26f, 0x1p-14f, 0x1.ff8p-15f, 1e-30f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  std::mt19937 rng(3);
  for (int i = 0; i < 100000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (!std::isnan(f)) x.push_back(f);
  }
  std::vector<uint16_t> got(x.size());
  kernels::float_to_half(x.data(), static_cast<int64_t>(x.size()), got.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], float_to_half(x[i])) << x[i];
}

// An F16 cache widens each half exactly and then runs the F32 arithmetic, so
// its attention is bitwise the F32 attention over the rounded entries.
TEST(Kernels, AttentionOverHalvesIsAttentionOverTheirFloats) {
  for (int64_t D : {64, 36}) {  // 36: a partial last vector
    const int64_t cap = 24, kvh = 2, qh = 4;
    const std::vector<float> q = randn(3 * qh * D, 8), k = randn(kvh * cap * D, 9), v = randn(kvh * cap * D, 10);
    const int64_t n = static_cast<int64_t>(k.size());
    std::vector<uint16_t> kh(k.size()), vh(v.size());
    kernels::float_to_half(k.data(), n, kh.data());
    kernels::float_to_half(v.data(), n, vh.data());
    std::vector<float> kw(k.size()), vw(v.size());
    kernels::half_to_float(kh.data(), n, kw.data());
    kernels::half_to_float(vh.data(), n, vw.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(kh[i], float_to_half(k[i])) << i;
    const std::vector<std::vector<int32_t>> visible = {{0, 1, 2, 3, 4}, {2, 5, 9}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}};
    Rows halves(3, qh * D), floats(3, qh * D);
    kernels::attention(q.data(), kh.data(), vh.data(), {3, qh, kvh, D, cap * D}, visible, 0.125f, halves.data());
    kernels::attention(q.data(), kw.data(), vw.data(), {3, qh, kvh, D, cap * D}, visible, 0.125f, floats.data());
    EXPECT_TRUE(same_values(halves, floats)) << "head_dim " << D;
  }
}

// The avx2 and avx512 attention bodies take a head's rows in one call (keys
// and values shared while in L1; avx512: two slots a register, up to eight
// rows at a time, 16-lane exponentials) and keep avx2::attention_row's
// sequence of operations, so each row has that function's bits, alone or
// with any others: both caches, the head sizes they take and one left to
// attention_row, 1 to 33 rows, which take every row blocking and remainder,
// over contexts the rows share for 71 slots (then branch), for 5 or 2 (a row
// that is a prefix of the first), or not at all; at 1 thread (the query
// heads of a KV head in one call) and 4 (each head alone).
#if defined(__x86_64__)
TEST(Kernels, AttentionRowsTogetherHaveTheRowAtATimeBits) {
  if (!kernels::isa_available(kernels::Isa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2";
  const kernels::Isa before = kernels::isa_in_use();
  const int threads_before = compute_threads();
  std::vector<kernels::Isa> paths = {kernels::Isa::kAvx2};
  if (kernels::isa_available(kernels::Isa::kAvx512)) paths.push_back(kernels::Isa::kAvx512);
  for (int64_t D : {32, 64, 96, 128, 48}) {
    const int64_t cap = 128, kvh = 2, qh = 6;
    for (auto [n, layout] : std::vector<std::pair<int64_t, int>>{
             {1, 0}, {2, 0}, {3, 0}, {4, 0}, {6, 0}, {7, 0}, {33, 0}, {7, 1}, {33, 1}, {7, 2}, {5, 3}}) {
      const std::vector<float> q = randn(n * qh * D, 20 + D + n, 3.0f);
      const std::vector<float> k = randn(kvh * cap * D, 21 + D), v = randn(kvh * cap * D, 22 + D);
      std::vector<uint16_t> kh(k.size()), vh(v.size());
      kernels::float_to_half(k.data(), kvh * cap * D, kh.data());
      kernels::float_to_half(v.data(), kvh * cap * D, vh.data());
      // A causal context of 71 to 103 slots, the first 71 shared (past a
      // value block of 32 and 64), then each row's own branch. Layout 1: the
      // last row sees only the first 5 slots, so 5 are shared (less than
      // avx512's group of scores), layout 3 the first 2 (less than avx2's);
      // layout 2: a row sees one slot of its own, so none.
      std::vector<std::vector<int32_t>> visible(n);
      for (int64_t i = 0; i < n; ++i)
        for (int32_t s = 0; s < cap; ++s)
          if (s <= 70 + i || (s >= 110 && s % (i + 2) != 1)) visible[i].push_back(s);
      if (layout == 1) visible[n - 1].resize(5);
      if (layout == 3) visible[n - 1].resize(2);
      if (layout == 2) visible[n / 2] = {5};
      // Row by row, head by head, the reference sequence.
      Rows want[2] = {Rows(n, qh * D), Rows(n, qh * D)};
      std::vector<float> scratch;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < qh; ++h) {
          const float* qr = q.data() + (i * qh + h) * D;
          const int64_t kv = (h / (qh / kvh)) * cap * D;
          kernels::avx2::attention_row(qr, k.data() + kv, v.data() + kv, visible[i], D, 0.125f, scratch,
                                       want[0].row(i) + h * D);
          kernels::avx2::attention_row(qr, kh.data() + kv, vh.data() + kv, visible[i], D, 0.125f, scratch,
                                       want[1].row(i) + h * D);
        }
      const kernels::AttentionShape shape{n, qh, kvh, D, cap * D};
      for (kernels::Isa path : paths)
        for (int threads : {1, 4}) {
          kernels::use_isa(path);
          set_compute_threads(threads);
          Rows got[2] = {Rows(n, qh * D), Rows(n, qh * D)};
          kernels::attention(q.data(), k.data(), v.data(), shape, visible, 0.125f, got[0].data());
          kernels::attention(q.data(), kh.data(), vh.data(), shape, visible, 0.125f, got[1].data());
          for (int cache = 0; cache < 2; ++cache)
            EXPECT_TRUE(same_values(want[cache], got[cache]))
                << kernels::isa_name(path) << (cache ? ", f16" : ", f32") << " cache, head_dim " << D << ", rows "
                << n << ", layout " << layout << ", threads " << threads;
        }
    }
  }
  kernels::use_isa(before);
  set_compute_threads(threads_before);
}
#endif

// The avx512 silu_mul (16 lanes, a masked tail) gives the avx2 one's bits,
// where exp overflows, underflows and meets infinities too.
TEST(Kernels, SiluMulIsTheSameOnTheAvx2AndAvx512Paths) {
  if (!kernels::isa_available(kernels::Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  const kernels::Isa before = kernels::isa_in_use();
  std::vector<float> g = randn(1001, 8, 6.0f);
  const std::vector<float> u = randn(1001, 9);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges = {88.0f, -88.0f, 88.8f, -88.8f, 104.0f, -104.0f, 110.0f, -110.0f,
                                    1e-40f, -1e-40f, 0.0f, -0.0f, inf, -inf, 30.0f, -30.0f};
  std::copy(edges.begin(), edges.end(), g.begin() + 20);
  for (int64_t count : {1, 7, 8, 15, 16, 17, 1001}) {
    std::vector<float> out[2];
    for (int path = 0; path < 2; ++path) {
      kernels::use_isa(path == 0 ? kernels::Isa::kAvx2 : kernels::Isa::kAvx512);
      out[path].resize(static_cast<size_t>(count));
      kernels::silu_mul(g.data(), u.data(), count, out[path].data());
    }
    // Bits, NaNs included (silu of -inf is inf / inf).
    EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), count * sizeof(float)), 0) << count;
  }
  kernels::use_isa(before);
}

TEST(Kernels, SiluMulIsElementwise) {
  const std::vector<float> g = randn(1001, 6, 4.0f), u = randn(1001, 7);
  std::vector<float> all(1001), want(1001);
  kernels::silu_mul(g.data(), u.data(), 1001, all.data());
  for (size_t i = 0; i < g.size(); ++i)
    want[i] = static_cast<float>(g[i] / (1.0 + std::exp(-static_cast<double>(g[i])))) * u[i];
  EXPECT_TRUE(all_close(as_row(all), as_row(want), 1e-5, 1e-6));
  for (int64_t off : {1, 3, 999}) {
    Rows part(1, 1001 - off);
    kernels::silu_mul(g.data() + off, u.data() + off, 1001 - off, part.data());
    EXPECT_TRUE(same_values(part, RowsView{all.data() + off, 1, 1001 - off})) << off;
  }
}

// Every weight type computes with its stored values: against the product
// of the dequantized weights (and, for the 32-weight blocks, of the
// activations as the kernels quantize them, which is the only other
// rounding; Q4_1's and Q5_1's min meets each block's sum as llama.cpp's
// Q8_1 carries it, rounded to half: the expected product takes that too).
TEST(Kernels, LinearOfEveryTypeComputesWithItsStoredValues) {
  for (WType t : {WType::F32, WType::F16, WType::BF16, WType::Q8_0, WType::Q4_0, WType::Q4_1, WType::Q5_0, WType::Q5_1,
                  WType::IQ4_NL}) {
    for (int64_t in : {32, 96, 704, 896}) {
      for (int64_t n : {1, 3, 4, 5, 9}) {
        const std::vector<float> wf = randn(37 * in, in * 10 + n), x = randn(n * in, in + n);
        std::vector<uint8_t> bytes(37 * row_bytes(t, in));
        quantize_rows(t, wf.data(), 37, in, bytes.data());
        const MatrixRef m{t, bytes.data(), 37, in};
        std::vector<float> stored(static_cast<size_t>(37 * in));
        dequantize_rows(m, 0, 37, stored.data());
        std::vector<float> xs = x;
        QuantizedRows q;
        if (is_quantized(t)) {
          quantize_activations(x.data(), n, in, q);
          for (int64_t i = 0; i < n * in; ++i) xs[i] = q.q[i] * q.d[i / kQBlock];
        }
        std::vector<float> want = reference_linear(xs.data(), n, stored.data(), 37, in);
        if (block_has_min(t)) {
          // Each block's m x sum(d_x q) becomes m x s.
          for (int64_t r = 0; r < 37; ++r)
            for (int64_t b = 0; b < in / kQBlock; ++b) {
              uint8_t blk[2 + kQBlock];
              read_block(m, r, b, blk);
              for (int64_t j = 0; j < n; ++j) {
                const int64_t i = j * q.blocks + b;
                want[j * 37 + r] += block_m(blk) * (q.s[i] - q.d[i] * static_cast<float>(q.sum[i]));
              }
            }
        }
        Rows y(n, 37);
        kernels::linear(x.data(), n, m, y.data());
        EXPECT_TRUE(all_close(y, RowsView{want.data(), n, 37}, 1e-4, 1e-3)) << wtype_name(t) << " " << in << "x" << n;
      }
    }
  }
}

TEST(Kernels, SumExpIsTheSoftmaxDenominator) {
  for (int64_t n : {1, 7, 8, 1024, 1029}) {
    const std::vector<float> x = randn(n, n, 5.0f);
    const float max = *std::max_element(x.begin(), x.end());
    double want = 0.0;
    for (float v : x) want += std::exp(static_cast<double>(v) - max);
    EXPECT_NEAR(kernels::sum_exp(x.data(), n, max), want, 1e-5 * want) << n;
  }
}

// The property exact greedy speculation rests on: verifying k tokens in one
// forward, as a chain or inside a tree, gives bitwise the logits of k
// one-token decoding steps, at every weight type (the K-quants as our
// quantizer's Q4_K_M, Q5_K_M and Q6_K mixes) and thread count.
// The KV cache at either type (kv_cache.h).
class ModelBatchInvariance : public ::testing::TestWithParam<std::tuple<WType, int, KVType>> {};

TEST_P(ModelBatchInvariance, ChainAndTreeEqualSingleSteps) {
  const auto [type, threads, kv] = GetParam();
  const int before = compute_threads();
  set_compute_threads(threads);
  // Wide enough that two threads split every matrix.
  ModelConfig c = tiny_config(512, 2);
  c.hidden_size = 256;
  c.intermediate_size = 768;
  c.head_dim = 64;
  auto m = Model::random(c, 31, type);
  m->set_kv_type(kv);
  const std::vector<int32_t> seq = {1, 9, 4, 33, 21, 7, 40, 2, 15, 16};
  KVCache step = m->new_cache();
  ASSERT_EQ(step.type(), kv);
  std::vector<Rows> rows;
  ForwardRequest r;
  r.tokens = {seq[0], seq[1], seq[2]};
  rows.push_back(m->forward(r, step).logits);
  for (size_t i = 3; i < seq.size(); ++i) {
    r.tokens = {seq[i]};
    rows.push_back(m->forward(r, step).logits);
  }
  const Rows stepwise = concat(rows);

  KVCache chain = m->new_cache();
  r.tokens = {seq[0], seq[1], seq[2]};
  m->forward(r, chain);
  r.tokens = std::vector<int32_t>(seq.begin() + 3, seq.end());
  EXPECT_TRUE(same_values(m->forward(r, chain).logits, stepwise.view().slice(3, 7))) << "chain of 7 vs 7 single steps";

  // The same continuation as one branch of a tree with a decoy branch first.
  KVCache tree = m->new_cache();
  r.tokens = {seq[0], seq[1], seq[2]};
  m->forward(r, tree);
  DraftTree t;
  t.tokens = {5, 6, 7};
  t.parents = {-1, 0, 1};
  for (size_t i = 3; i < seq.size(); ++i) {
    t.tokens.push_back(seq[i]);
    t.parents.push_back(i == 3 ? -1 : static_cast<int32_t>(t.tokens.size()) - 2);
  }
  ForwardRequest tr;
  tr.tokens = t.tokens;
  for (int d : t.depths()) tr.positions.push_back(3 + d - 1);
  tr.mask = tree_attention_mask(t.parents, 3);
  const Rows tree_logits = m->forward(tr, tree).logits;
  EXPECT_TRUE(same_values(tree_logits.view().slice(3, 7), stepwise.view().slice(3, 7)))
      << "tree branch vs single steps";
  set_compute_threads(before);
}

INSTANTIATE_TEST_SUITE_P(EveryType, ModelBatchInvariance,
                         ::testing::Combine(::testing::Values(WType::F32, WType::F16, WType::BF16, WType::Q8_0, WType::Q4_0,
                                                              WType::Q4_1, WType::Q5_0, WType::Q5_1, WType::IQ4_NL,
                                                              // llama.cpp's mixes (Q4_K_M, Q5_K_M, Q6_K, Q3_K_M, Q2_K)
                                                              WType::Q4_K, WType::Q5_K, WType::Q6_K, WType::Q3_K,
                                                              WType::Q2_K),
                                            ::testing::Values(1, 2), ::testing::Values(KVType::F32, KVType::F16)),
                         [](const auto& info) {
                           return std::string(wtype_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "threads_kv" +
                                  kv_type_name(std::get<2>(info.param));
                         });

}  // namespace splitspec::test

namespace splitspec::test {
namespace {

// Gemma 3's sliding window and LongRoPE under what speculation does to the
// cache: a chain verified in one forward, a tree with a decoy branch, and a
// rejected draft rolled back and redone all give the single steps' logits,
// bit for bit, while the window (3 positions here) slides past the prefix
// and the trees' nodes.
TEST(FamilyForwards, SlidingWindowAndLongRopeHoldUnderChainsTreesAndRollback) {
  for (const ModelConfig& c : {tiny_gemma3_config(64, 4), tiny_longrope_config(64, 2)}) {
    SCOPED_TRACE(c.architecture);
    const auto m = Model::random(c, 17, WType::F32, 0.3f);
    const std::vector<int32_t> seq = {1, 9, 4, 33, 21, 7, 40, 2, 15, 16, 5, 8, 30, 12, 60, 3, 11, 44, 19, 50};
    const int64_t prefix = 6;
    KVCache step = m->new_cache();
    std::vector<Rows> rows;
    ForwardRequest r;
    r.tokens.assign(seq.begin(), seq.begin() + prefix);
    m->forward(r, step);
    for (size_t i = prefix; i < seq.size(); ++i) {
      r.tokens = {seq[i]};
      rows.push_back(m->forward(r, step).logits);
    }
    const Rows stepwise = concat(rows);
    const std::vector<int32_t> rest(seq.begin() + prefix, seq.end());

    KVCache chain = m->new_cache();
    r.tokens.assign(seq.begin(), seq.begin() + prefix);
    m->forward(r, chain);
    r.tokens = rest;
    EXPECT_TRUE(same_values(m->forward(r, chain).logits, stepwise)) << "chain";

    // A decoy branch of 5 first, then the continuation: its nodes sit 5
    // slots past their positions, and the window must count positions.
    KVCache tree = m->new_cache();
    r.tokens.assign(seq.begin(), seq.begin() + prefix);
    m->forward(r, tree);
    DraftTree t;
    t.tokens = {5, 6, 7, 8, 9};
    t.parents = {-1, 0, 1, 2, 3};
    for (size_t i = 0; i < rest.size(); ++i) {
      t.tokens.push_back(rest[i]);
      t.parents.push_back(i == 0 ? -1 : static_cast<int32_t>(t.tokens.size()) - 2);
    }
    ForwardRequest tr;
    tr.tokens = t.tokens;
    for (int d : t.depths()) tr.positions.push_back(prefix + d - 1);
    tr.mask = tree_attention_mask(t.parents, prefix);
    const Rows tree_logits = m->forward(tr, tree).logits;
    EXPECT_TRUE(same_values(tree_logits.view().slice(5, tree_logits.rows() - 5), stepwise)) << "tree branch";

    // A rejected draft of 4, rolled back, then the right tokens; and the
    // tree's accepted branch kept and carried on.
    KVCache redo = m->new_cache();
    r.tokens.assign(seq.begin(), seq.begin() + prefix);
    m->forward(r, redo);
    r.tokens = {50, 51, 52, 53};
    m->forward(r, redo);
    redo.truncate(prefix);
    r.tokens = rest;
    EXPECT_TRUE(same_values(m->forward(r, redo).logits, stepwise)) << "after a rollback";
    std::vector<int64_t> keep;
    for (int64_t i = 5; i < 9; ++i) keep.push_back(i);
    tree.keep(prefix, keep);
    r.tokens.assign(rest.begin() + 4, rest.end());
    EXPECT_TRUE(same_values(m->forward(r, tree).logits, stepwise.view().slice(4, stepwise.rows() - 4)))
        << "after keeping a branch";
  }
}

}  // namespace
}  // namespace splitspec::test

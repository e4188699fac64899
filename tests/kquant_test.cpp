// Super-blocks (Q2_K .. Q6_K; IQ4_XS read only) as llama.cpp stores them: products against
// Q8_K activations near the dequantized weights' float product, batch
// invariant; a model of them through GGUF and a directory unchanged; our
// quantizer close to the values and llama.cpp's per-tensor mixes; the packed
// layout a permutation of the file's bytes. Agreement with llama.cpp itself on files
// its quantizer wrote: tests/families/families_test.py --kquants.
#include "common/kernels/kquant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/kernels/linear.h"
#include "common/kernels/quant.h"
#include "common/model/model.h"
#include "common/util/error.h"
#include "common/weights/gguf.h"
#include "common/convert/gguf_convert.h"
#include "tests/test_util.h"

namespace splitspec::test {
namespace {

// Random super-blocks with modest finite scales.
std::vector<uint8_t> random_kquant(WType t, int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> w(static_cast<size_t>(rows * row_bytes(t, cols)));
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.0005f, 0.01f);
  for (size_t at = 0; at < w.size(); at += static_cast<size_t>(superblock_bytes(t))) {
    const uint16_t d = float_to_half(scale(rng)), dmin = float_to_half(scale(rng));
    const size_t d_at = static_cast<size_t>(superblock_d_offset(t));
    std::memcpy(&w[at + d_at], &d, 2);
    if (superblock_has_mins(t)) std::memcpy(&w[at + d_at + 2], &dmin, 2);
  }
  return w;
}

// A model wide enough for K-quants' rows of 256.
ModelConfig wide_config(int64_t layers) {
  ModelConfig c = tiny_config(64, layers);
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.head_dim = 64;
  return c;
}

Rows logits(const Model& m) {
  KVCache cache = m.new_cache(16);
  ForwardRequest r;
  r.tokens = {1, 7, 30, 2};
  return m.forward(r, cache).logits;
}

TEST(KQuant, ProductsTrackTheDequantizedWeightsAndAreBatchInvariant) {
  for (WType t : {WType::Q4_K, WType::Q5_K, WType::Q6_K, WType::Q2_K, WType::Q3_K, WType::IQ4_XS}) {
    SCOPED_TRACE(wtype_name(t));
    const int64_t rows = 24, cols = 512, n = 5;
    const std::vector<uint8_t> bytes = random_kquant(t, rows, cols, 3);
    const MatrixRef w{t, bytes.data(), rows, cols};
    std::vector<float> wf(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(n * cols));
    dequantize_rows(w, 0, rows, wf.data());
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    for (float& v : x) v = normal(rng);
    std::vector<float> y(static_cast<size_t>(n * rows));
    kernels::linear(x.data(), n, w, y.data());
    for (int64_t j = 0; j < n; ++j) {
      std::vector<float> one(static_cast<size_t>(rows));
      kernels::linear(x.data() + j * cols, 1, w, one.data());
      EXPECT_EQ(std::memcmp(one.data(), y.data() + j * rows, one.size() * sizeof(float)), 0) << "row " << j;
      for (int64_t r = 0; r < rows; ++r) {
        double exact = 0, norm = 0;
        for (int64_t i = 0; i < cols; ++i) {
          exact += static_cast<double>(wf[r * cols + i]) * x[j * cols + i];
          norm += std::fabs(static_cast<double>(wf[r * cols + i]) * x[j * cols + i]);
        }
        // Q8_K rounds each input by at most half a step of max|x| / 127.
        EXPECT_NEAR(y[j * rows + r], exact, 0.02 * norm + 1e-6) << "output " << r;
      }
    }
  }
}

// The activations' Q8_K form is the same on every instruction set, edge
// cases included: the first of two equal magnitudes of opposite sign,
// rounding ties, an all-zero block beside a NaN, an infinity. Seen through
// the products (the plain and the packed bodies) against the reference.
TEST(KQuant, ActivationsQuantizeAlikeOnEveryInstructionSet) {
  const int64_t cols = 512, n = 3, rows = 24;
  std::vector<float> x(static_cast<size_t>(n * cols));
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  float* tie = x.data() + cols;  // row 1: -3 before +3, both of the largest magnitude
  tie[5] = -3.5f;
  tie[9] = 3.5f;
  tie[200] = 3.5f;
  for (int i = 0; i < kSuperBlock; ++i) tie[kSuperBlock + i] = 0.0f;
  tie[kSuperBlock + 17] = std::nanf("");
  float* edge = x.data() + 2 * cols;  // row 2: an infinity; max 127, so every x.5 is a tie
  edge[40] = INFINITY;
  for (int i = 0; i < kSuperBlock; ++i) edge[kSuperBlock + i] = static_cast<float>(i % 40 - 20) + 0.5f;
  edge[kSuperBlock + 3] = 127.0f;
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::isnan(a[i]) && std::isnan(b[i])) && std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
    return true;
  };
  const kernels::Isa before = kernels::isa_in_use();
  for (WType t : {WType::Q4_K, WType::Q6_K, WType::Q5_K}) {
    std::vector<uint8_t> bytes = random_kquant(t, rows, cols, 4), scratch;
    std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size());
    kernels::linear_reference(x.data(), n, MatrixRef{t, bytes.data(), rows, cols}, want.data());
    std::vector<uint8_t> packed = bytes;
    const bool packs = t != WType::Q5_K;
    if (packs) pack_rows(t, packed.data(), rows, cols, scratch);
    for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512, kernels::Isa::kNeon}) {
      if (!kernels::isa_available(isa)) continue;
      kernels::use_isa(isa);
      kernels::linear(x.data(), n, MatrixRef{t, bytes.data(), rows, cols}, got.data());
      EXPECT_TRUE(same(got, want)) << wtype_name(t) << " " << kernels::isa_name(isa);
      if (packs) {
        kernels::linear(x.data(), n, MatrixRef{t, packed.data(), rows, cols, true}, got.data());
        EXPECT_TRUE(same(got, want)) << wtype_name(t) << " packed " << kernels::isa_name(isa);
      }
    }
  }
  kernels::use_isa(before);
}

// The packed layout (Q4_K, Q6_K) is a permutation of each group's bytes:
// packing and unpacking give the file's bytes back, every super-block reads
// back as stored, and a packed matrix (a tail row past the last whole group
// included) dequantizes and multiplies exactly as the plain one.
TEST(KQuant, PackedRowsAreThePlainRowsRegrouped) {
  for (WType t : {WType::Q4_K, WType::Q6_K}) {
    SCOPED_TRACE(wtype_name(t));
    const int64_t rows = 2 * kKPackRows + 3, cols = 768, n = 3;
    const std::vector<uint8_t> plain = random_kquant(t, rows, cols, 11);
    std::vector<uint8_t> packed = plain, scratch;
    kquant_regroup_rows(t, packed.data(), rows, cols, scratch, true);
    EXPECT_NE(packed, plain);
    std::vector<uint8_t> back = packed;
    kquant_regroup_rows(t, back.data(), rows, cols, scratch, false);
    EXPECT_EQ(back, plain);
    const MatrixRef p{t, packed.data(), rows, cols, true}, w{t, plain.data(), rows, cols};
    std::vector<uint8_t> block(static_cast<size_t>(superblock_bytes(t)));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < cols / kSuperBlock; ++b) {
        read_superblock(p, r, b, block.data());
        ASSERT_EQ(std::memcmp(block.data(), w.row(r) + b * superblock_bytes(t), block.size()), 0) << r << " " << b;
      }
    std::vector<float> a(static_cast<size_t>(rows * cols)), c(a.size());
    dequantize_rows(w, 0, rows, a.data());
    dequantize_rows(p, 0, rows, c.data());
    EXPECT_EQ(a, c);
    std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows)), z(y.size());
    std::mt19937 rng(2);
    std::normal_distribution<float> normal;
    for (float& v : x) v = normal(rng);
    kernels::linear_reference(x.data(), n, w, y.data());
    kernels::linear(x.data(), n, p, z.data());
    EXPECT_EQ(std::memcmp(y.data(), z.data(), y.size() * sizeof(float)), 0);
  }
  std::vector<uint8_t> q5 = random_kquant(WType::Q5_K, kKPackRows, 256, 1), scratch;
  EXPECT_THROW(kquant_regroup_rows(WType::Q5_K, q5.data(), kKPackRows, 256, scratch, true), Error);
}

// Our quantizer: each weight within a step of the widest sub-block's grid
// (the scales themselves rounded to 6 or 8 bits), a quarter-step or so on
// average.
TEST(KQuant, QuantizerStaysWithinAStep) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (WType t : {WType::Q4_K, WType::Q5_K, WType::Q6_K, WType::Q3_K, WType::Q2_K}) {
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> x(kSuperBlock), y(kSuperBlock);
      for (float& v : x) v = normal(rng) * (trial % 5 == 0 ? 10.0f : 1.0f);
      if (trial == 1) std::fill(x.begin(), x.end(), 0.0f);
      if (trial == 2) std::fill(x.begin(), x.end(), 0.5f);
      std::vector<uint8_t> b(static_cast<size_t>(superblock_bytes(t)));
      quantize_superblock(t, x.data(), b.data());
      dequantize_superblock(t, b.data(), y.data());
      float amax = 0.0f;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      // The widest sub-block step: a range of up to 2 amax over 15, 31 or 3
      // levels (Q4_K, Q5_K, Q2_K); Q6_K's amax over 32, Q3_K's over 4.
      const float step = t == WType::Q4_K   ? 2 * amax / 15
                         : t == WType::Q5_K ? 2 * amax / 31
                         : t == WType::Q2_K ? 2 * amax / 3
                         : t == WType::Q3_K ? amax / 4
                                            : amax / 32;
      double err = 0.0;
      for (int i = 0; i < kSuperBlock; ++i) {
        EXPECT_LE(std::fabs(x[i] - y[i]), step + 1e-7f) << wtype_name(t) << " weight " << i;
        err += std::fabs(x[i] - y[i]);
      }
      EXPECT_LE(err / kSuperBlock, 0.35 * step + 1e-7) << wtype_name(t);
    }
  }
}

// llama.cpp's rules (llama_tensor_get_type): Q4_K_M/Q5_K_M's head Q6_K and
// attn_v and ffn_down Q6_K in the first and last eighth of the layers and
// every third between; Q3_K_M's and Q2_K's own; then its fallback types for
// rows that are not whole super-blocks.
TEST(KQuant, MixesFollowLlamaCppRules) {
  EXPECT_EQ(parse_weight_type("Q4_K_M"), WType::Q4_K);
  EXPECT_EQ(parse_weight_type("q5_k_m"), WType::Q5_K);
  EXPECT_EQ(parse_weight_type("Q3_K_M"), WType::Q3_K);
  EXPECT_EQ(parse_weight_type("q2_k"), WType::Q2_K);
  EXPECT_EQ(parse_weight_type("Q6_K"), WType::Q6_K);
  EXPECT_EQ(parse_weight_type("q5_0"), WType::Q5_0);
  EXPECT_EQ(parse_weight_type("IQ4_NL"), WType::IQ4_NL);
  // IQ4_XS is read, never written: a conversion to it is refused by name,
  // and the quantizer refuses it too.
  EXPECT_NE(error_of([] { parse_weight_type("iq4_xs"); }).find("read from GGUF files but not written"), std::string::npos);
  EXPECT_NE(error_of([] { parse_weight_type("q7_k"); }).find("q3_k_m, q2_k and q6_k"), std::string::npos);
  float zeros[kSuperBlock] = {};
  uint8_t block[136];
  EXPECT_NE(error_of([&] { quantize_superblock(WType::IQ4_XS, zeros, block); }).find("iq4_xs is read but not written"),
            std::string::npos);
  ModelConfig c = tiny_config(64, 16);
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.head_dim = 64;  // attn_output's rows: heads x 64 = 256
  std::vector<int> more;
  for (int64_t l = 0; l < 16; ++l) {
    const WType v = tensor_type(WType::Q4_K, layer_slot(c, l, LayerMatrix::kV));
    EXPECT_EQ(tensor_type(WType::Q4_K, layer_slot(c, l, LayerMatrix::kDown)), v);
    EXPECT_EQ(tensor_type(WType::Q4_K, layer_slot(c, l, LayerMatrix::kQ)), WType::Q4_K);
    EXPECT_EQ(tensor_type(WType::Q4_K, layer_slot(c, l, LayerMatrix::kO)), WType::Q4_K);
    if (v == WType::Q6_K) more.push_back(static_cast<int>(l));
  }
  // llama.cpp's use_more_bits for 16 layers: 0, 1, then every third from 4, then 14, 15.
  EXPECT_EQ(more, (std::vector<int>{0, 1, 4, 7, 10, 13, 14, 15}));
  EXPECT_EQ(tensor_type(WType::Q5_K, head_slot(c)), WType::Q6_K);
  EXPECT_EQ(tensor_type(WType::Q5_K, embed_slot(c)), WType::Q5_K);
  // Q3_K_M: attn_v Q5_K in layers 0-1, Q4_K after; ffn_down Q5_K in the first
  // sixteenth; attn_output Q4_K; the rest Q3_K.
  EXPECT_EQ(tensor_type(WType::Q3_K, layer_slot(c, 1, LayerMatrix::kV)), WType::Q5_K);
  EXPECT_EQ(tensor_type(WType::Q3_K, layer_slot(c, 2, LayerMatrix::kV)), WType::Q4_K);
  EXPECT_EQ(tensor_type(WType::Q3_K, layer_slot(c, 0, LayerMatrix::kDown)), WType::Q5_K);
  EXPECT_EQ(tensor_type(WType::Q3_K, layer_slot(c, 1, LayerMatrix::kDown)), WType::Q4_K);
  EXPECT_EQ(tensor_type(WType::Q3_K, layer_slot(c, 5, LayerMatrix::kO)), WType::Q4_K);
  EXPECT_EQ(tensor_type(WType::Q3_K, layer_slot(c, 5, LayerMatrix::kUp)), WType::Q3_K);
  EXPECT_EQ(tensor_type(WType::Q3_K, head_slot(c)), WType::Q6_K);
  // Q2_K: attn_v by heads per key-value head (tiny_config's 4 / 2 = 2: Q3_K);
  // ffn_down and attn_output Q3_K; the rest Q2_K.
  EXPECT_EQ(tensor_type(WType::Q2_K, layer_slot(c, 3, LayerMatrix::kV)), WType::Q3_K);
  EXPECT_EQ(tensor_type(WType::Q2_K, layer_slot(c, 3, LayerMatrix::kDown)), WType::Q3_K);
  EXPECT_EQ(tensor_type(WType::Q2_K, layer_slot(c, 3, LayerMatrix::kO)), WType::Q3_K);
  EXPECT_EQ(tensor_type(WType::Q2_K, layer_slot(c, 3, LayerMatrix::kGate)), WType::Q2_K);
  ModelConfig g = c;
  g.num_attention_heads = 8;
  g.num_key_value_heads = 2;
  EXPECT_EQ(tensor_type(WType::Q2_K, layer_slot(g, 3, LayerMatrix::kV)), WType::Q4_K);
  c.tie_word_embeddings = true;
  EXPECT_EQ(tensor_type(WType::Q4_K, embed_slot(c)), WType::Q6_K);
  EXPECT_EQ(tensor_type(WType::Q6_K, layer_slot(c, 3, LayerMatrix::kGate)), WType::Q6_K);
  EXPECT_EQ(tensor_type(WType::Q4_0, head_slot(c)), WType::Q8_0);
  // Rows of 576 (SmolLM2-135M's width): llama.cpp's fallback types.
  c.hidden_size = 576;
  c.intermediate_size = 1536;
  EXPECT_EQ(tensor_type(WType::Q4_K, layer_slot(c, 3, LayerMatrix::kQ)), WType::Q5_0);
  EXPECT_EQ(tensor_type(WType::Q4_K, layer_slot(c, 0, LayerMatrix::kV)), WType::Q8_0);  // Q6_K's fallback
  EXPECT_EQ(tensor_type(WType::Q4_K, layer_slot(c, 0, LayerMatrix::kDown)), WType::Q6_K);  // rows of 1536
  EXPECT_EQ(tensor_type(WType::Q5_K, layer_slot(c, 3, LayerMatrix::kUp)), WType::Q5_1);
  EXPECT_EQ(tensor_type(WType::Q3_K, layer_slot(c, 3, LayerMatrix::kUp)), WType::Q4_0);
  EXPECT_EQ(tensor_type(WType::Q3_K, layer_slot(c, 5, LayerMatrix::kV)), WType::Q5_0);  // Q4_K's fallback
  EXPECT_EQ(tensor_type(WType::Q2_K, layer_slot(c, 3, LayerMatrix::kGate)), WType::Q4_0);
  EXPECT_EQ(tensor_type(WType::Q4_K, embed_slot(c)), WType::Q8_0);  // the tied head
  c.hidden_size = 100;  // not even whole 32-blocks
  EXPECT_EQ(tensor_type(WType::Q4_K, layer_slot(c, 3, LayerMatrix::kQ)), WType::F16);
  // Phi-3's fused q, k, v take attn_v's type together.
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.architecture = "phi3";
  EXPECT_EQ(tensor_type(WType::Q4_K, layer_slot(c, 0, LayerMatrix::kQ)), WType::Q6_K);
  EXPECT_EQ(tensor_type(WType::Q4_K, layer_slot(c, 2, LayerMatrix::kK)), WType::Q4_K);
}

// A model converted to q4_k_m by our quantizer, as a directory and as GGUF:
// the per-tensor types of the mix, the same logits either way.
TEST(KQuant, ConvertWritesTheMix) {
  TempDir dir;
  const ModelConfig c = wide_config(2);
  const auto f32 = Model::random(c, 4, WType::F32, 0.05f);
  f32->save(dir.str("f32"));
  const auto q = Model::load(dir.str("f32"), WType::Q4_K);
  const WeightSet& w = q->weight_set();
  EXPECT_EQ(w.lm_head.type, WType::Q6_K);
  // Of 2 layers, the last is in the last eighth.
  EXPECT_EQ(w.layers[0][static_cast<int>(LayerMatrix::kV)].type, WType::Q4_K);
  EXPECT_EQ(w.layers[1][static_cast<int>(LayerMatrix::kV)].type, WType::Q6_K);
  EXPECT_EQ(w.layers[1][static_cast<int>(LayerMatrix::kQ)].type, WType::Q4_K);
  const std::string gguf = dir.str("q.gguf");
  write_gguf(c, w, "q", [](GgufWriter&) {}, gguf, std::nullopt);
  const Rows want = logits(*q), got = logits(*Model::load(gguf));
  ASSERT_EQ(got.rows(), want.rows());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.rows() * want.cols() * sizeof(float)), 0);
}

// A model whose layers are K-quants, as a GGUF file written tensor by tensor,
// read in place, saved as a directory and read back, and streamed: the same
// logits; and converted to Q8_0 on load.
TEST(KQuant, ModelThroughGgufAndDirectoryIsUnchanged) {
  TempDir dir;
  const ModelConfig c = wide_config(1);
  const auto f32 = Model::random(c, 9, WType::F32, 0.05f);
  // The layers' matrices replaced by random K-quant bytes of their shapes.
  WeightSet w = f32->weight_set();
  std::vector<std::vector<uint8_t>> keep;
  const WType types[] = {WType::Q4_K, WType::Q5_K, WType::Q6_K};
  int i = 0;
  for (LayerMatrix m : layer_matrices(c, 0)) {
    MatrixRef& ref = w.layers[0][static_cast<int>(m)];
    const WType t = types[i % 3];
    keep.push_back(random_kquant(t, ref.rows, ref.cols, 20 + i++));
    ref = MatrixRef{t, keep.back().data(), ref.rows, ref.cols};
  }
  const auto model = Model::from_weight_set(c, w, "kq");
  const std::string gguf = dir.str("kq.gguf");
  write_gguf(c, w, "kq", [](GgufWriter&) {}, gguf, std::nullopt);
  const Rows want = logits(*model);
  const auto loaded = Model::load(gguf);
  EXPECT_EQ(loaded->weight_set().layers[0][2].type, WType::Q6_K);
  const Rows got = logits(*loaded);
  ASSERT_EQ(got.rows(), want.rows());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.rows() * want.cols() * sizeof(float)), 0);
  loaded->save(dir.str("kq-dir"));
  const Rows again = logits(*Model::load(dir.str("kq-dir")));
  EXPECT_EQ(std::memcmp(again.data(), want.data(), want.rows() * want.cols() * sizeof(float)), 0);
  // Streamed from disk under a budget, on the K-quant bytes as stored.
  StreamOptions s;
  s.budget_bytes = stored_weight_bytes(dir.str("kq-dir")) * 4;
  s.direct_io = false;
  const Rows streamed = logits(*Model::load_streamed(dir.str("kq-dir"), s));
  EXPECT_EQ(std::memcmp(streamed.data(), want.data(), want.rows() * want.cols() * sizeof(float)), 0);
  // As Q8_0 on load: another model, close to this one.
  const auto q8 = Model::load(gguf, WType::Q8_0);
  EXPECT_EQ(q8->weight_set().layers[0][0].type, WType::Q8_0);
}

}  // namespace
}  // namespace splitspec::test

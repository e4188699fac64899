// K-quants (Q4_K, Q5_K, Q6_K) as llama.cpp stores them: products against
// Q8_K activations near the dequantized weights' float product, batch
// invariant; a model of them through GGUF and a directory unchanged; writing
// them refused with a clear error. Agreement with llama.cpp itself on files
// its quantizer wrote: tests/families/families_test.py --kquants.
#include "common/engine/kquant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/engine/gguf.h"
#include "common/engine/gguf_convert.h"
#include "common/engine/linear.h"
#include "common/engine/model.h"
#include "common/engine/quant.h"
#include "common/util/error.h"
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
    std::memcpy(&w[at + (t == WType::Q6_K ? 208 : 0)], &d, 2);
    if (t != WType::Q6_K) std::memcpy(&w[at + 2], &dmin, 2);
  }
  return w;
}

TEST(KQuant, ProductsTrackTheDequantizedWeightsAndAreBatchInvariant) {
  for (WType t : {WType::Q4_K, WType::Q5_K, WType::Q6_K}) {
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

TEST(KQuant, WritingThemIsAClearError) {
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> out(static_cast<size_t>(row_bytes(WType::Q4_K, 256)));
  EXPECT_NE(error_of([&] { quantize_rows(WType::Q4_K, x.data(), 1, 256, out.data()); })
                .find("writing q4_k is not supported yet"),
            std::string::npos);
  EXPECT_EQ(parse_weight_type("Q6_K"), WType::Q6_K);
}

// A model whose layers are K-quants, as a GGUF file written tensor by tensor,
// read in place, saved as a directory and read back, and streamed: the same
// logits; and converted to Q8_0 on load.
TEST(KQuant, ModelThroughGgufAndDirectoryIsUnchanged) {
  TempDir dir;
  ModelConfig c = tiny_config(64, 1);
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.head_dim = 64;
  const auto f32 = Model::random(c, 9, WType::F32, 0.05f);
  // The layers' matrices replaced by random K-quant bytes of their shapes.
  WeightSet w = f32->weight_set();
  std::vector<std::vector<uint8_t>> keep;
  const WType types[kLayerMatrices] = {WType::Q4_K, WType::Q5_K, WType::Q6_K, WType::Q4_K,
                                       WType::Q5_K, WType::Q6_K, WType::Q4_K};
  for (int m = 0; m < kLayerMatrices; ++m) {
    MatrixRef& ref = w.layers[0][m];
    keep.push_back(random_kquant(types[m], ref.rows, ref.cols, 20 + m));
    ref = MatrixRef{types[m], keep.back().data(), ref.rows, ref.cols};
  }
  const auto model = Model::from_weight_set(c, w, "kq");
  const std::string gguf = dir.str("kq.gguf");
  write_gguf(c, w, "kq", [](GgufWriter&) {}, gguf, std::nullopt);
  auto logits = [](const Model& m) {
    KVCache cache = m.new_cache(16);
    ForwardRequest r;
    r.tokens = {1, 7, 30, 2};
    return m.forward(r, cache).logits;
  };
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

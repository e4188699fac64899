#include "common/model/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/drafting/registry.h"
#include "common/util/error.h"
#include "common/weights/safetensors.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

Rows logits_for(const Model& m, const std::vector<int32_t>& tokens) {
  KVCache cache = m.new_cache();
  ForwardRequest r;
  r.tokens = tokens;
  return m.forward(r, cache).logits;
}

std::string load_error(const std::string& dir) {
  try {
    Model::load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A float tensor of a safetensors file, copied out of it.
struct FloatTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Rewrites dir/model.safetensors (float tensors) with `edit` applied to the tensor list.
void rewrite_weights(const TempDir& dir, const std::function<void(std::vector<FloatTensor>&)>& edit) {
  std::vector<FloatTensor> tensors;
  {
    SafetensorsFile f(dir.str("model.safetensors"));
    for (const auto& [name, t] : f.tensors()) {
      const auto* v = reinterpret_cast<const float*>(t.data);
      tensors.push_back({name, t.shape, std::vector<float>(v, v + t.nbytes / sizeof(float))});
    }
  }
  edit(tensors);
  std::vector<TensorToWrite> out;
  for (const FloatTensor& t : tensors)
    out.push_back({t.name, DType::F32, t.shape, t.values.data(), t.values.size() * sizeof(float)});
  write_safetensors(dir.str("model.safetensors"), out);
}

}  // namespace

TEST(Model, SaveThenLoadGivesIdenticalLogits) {
  for (bool tied : {false, true}) {
    TempDir dir;
    auto m = Model::random(tiny_config(50, 2, tied), 1);
    m->save(dir.str());
    auto loaded = Model::load(dir.str());
    const std::vector<int32_t> toks = {1, 5, 9, 33, 2, 49};
    EXPECT_TRUE(same_values(logits_for(*m, toks), logits_for(*loaded, toks))) << "tied=" << tied;
  }
}

TEST(Model, EveryWeightTypeLoadsCloseToFp32) {
  auto m = Model::random(tiny_config(), 2);
  const std::vector<int32_t> toks = {1, 7, 8, 9};
  const Rows ref = logits_for(*m, toks);
  double spread = 0.0;
  for (int64_t i = 0; i < ref.size(); ++i) spread = std::max(spread, std::abs(static_cast<double>(ref.data()[i])));
  TempDir f32;
  m->save(f32.str());
  for (WType t : {WType::F16, WType::BF16, WType::Q8_0, WType::Q4_0}) {
    TempDir dir;
    m->save(dir.str(), t);
    auto loaded = Model::load(dir.str());
    EXPECT_EQ(loaded->weight_type(), t);
    // Relative to the logits' spread: quantization errors add up over layers.
    const double tol = t == WType::F16 ? 5e-3 : t == WType::BF16 ? 5e-2 : t == WType::Q8_0 ? 3e-2 : 2e-1;
    EXPECT_TRUE(all_close(logits_for(*loaded, toks), ref, 0.0, tol * spread)) << wtype_name(t);
    // Converting at load gives the same model as converting the file.
    EXPECT_TRUE(same_values(logits_for(*loaded, toks), logits_for(*Model::load(f32.str(), t), toks))) << wtype_name(t);
  }
}

TEST(Model, WeightBytesCountsTiedHeadOnce) {
  auto tied = Model::random(tiny_config(50, 2, true), 1);
  auto untied = Model::random(tiny_config(50, 2, false), 1);
  EXPECT_EQ(untied->weight_bytes() - tied->weight_bytes(), 50u * 32u * 4u);
  EXPECT_EQ(static_cast<int64_t>(tied->weight_bytes()), tied->config().num_parameters() * 4);
}

// The packed kernels load a group's 64-byte pieces whole: a copy that started
// off a line would make every load read two.
TEST(Model, CopiedWeightsStartOnCacheLines) {
  TempDir dir;
  Model::random(tiny_config(), 2)->save(dir.str());
  for (WType t : {WType::Q8_0, WType::Q4_0, WType::F16}) {
    auto loaded = Model::load(dir.str(), t);
    const WeightSet& w = loaded->weight_set();
    ASSERT_FALSE(w.owned.empty()) << wtype_name(t);
    for (const WeightBytes& b : w.owned) EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u) << wtype_name(t);
  }
}

TEST(Model, HiddenStatesOfRequestedLayers) {
  auto m = Model::random(tiny_config(50, 3), 3);
  KVCache cache = m->new_cache();
  ForwardRequest r;
  r.tokens = {1, 2, 3};
  r.hidden_layers = {0, 2};
  r.logits_rows = std::vector<int64_t>{2};
  auto out = m->forward(r, cache);
  ASSERT_EQ(out.hidden.size(), 2u);
  EXPECT_EQ(out.hidden.at(0).rows(), 3);
  EXPECT_EQ(out.hidden.at(0).cols(), 32);
  EXPECT_EQ(out.logits.rows(), 1);
  EXPECT_EQ(out.logits.cols(), 50);
  ASSERT_EQ(out.hidden.at(2).rows(), 3);
  ASSERT_EQ(out.hidden.at(2).cols(), 32);
  EXPECT_FALSE(all_close(out.hidden.at(0), out.hidden.at(2)));
}

TEST(ModelBadInput, DirectoryDoesNotExist) {
  EXPECT_EQ(load_error("/nonexistent/model"),
            "/nonexistent/model: model directory does not exist (nor a GGUF file of that name)");
  TempDir dir;
  std::ofstream(dir.str("notes.txt")) << "not a model";
  EXPECT_EQ(load_error(dir.str("notes.txt")), dir.str("notes.txt") + ": neither a model directory nor a GGUF file");
}

TEST(ModelBadInput, MissingConfig) {
  TempDir dir;
  EXPECT_NE(load_error(dir.str()).find("config.json: cannot open"), std::string::npos);
}

TEST(ModelBadInput, MissingTensorIsNamed) {
  TempDir dir;
  Model::random(tiny_config(), 1)->save(dir.str());
  rewrite_weights(dir, [](auto& ts) {
    const auto up = [](const FloatTensor& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; };
    ts.erase(std::remove_if(ts.begin(), ts.end(), up), ts.end());
  });
  EXPECT_NE(load_error(dir.str()).find("missing tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos);
}

TEST(ModelBadInput, WrongShapeIsNamedWithBothShapes) {
  TempDir dir;
  Model::random(tiny_config(), 1)->save(dir.str());
  rewrite_weights(dir, [](auto& ts) {
    for (auto& t : ts)
      if (t.name == "model.layers.0.self_attn.k_proj.weight") {
        t.shape = {8, 32};
        t.values.assign(8 * 32, 0.0f);
      }
  });
  const std::string e = load_error(dir.str());
  EXPECT_NE(e.find("tensor 'model.layers.0.self_attn.k_proj.weight' has shape [8, 32], expected [16, 32]"), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST(ModelBadInput, NonFiniteWeights) {
  TempDir dir;
  Model::random(tiny_config(), 1)->save(dir.str());
  rewrite_weights(dir, [](auto& ts) {
    for (auto& t : ts)
      if (t.name == "model.norm.weight") t.values[3] = std::numeric_limits<float>::quiet_NaN();
  });
  EXPECT_NE(load_error(dir.str()).find("'model.norm.weight' contains NaN"), std::string::npos);
}

TEST(ModelBadInput, ConfigDisagreesWithWeights) {
  TempDir dir;
  Model::random(tiny_config(50), 1)->save(dir.str());
  auto c = tiny_config(60);
  write_file(dir.path() / "config.json", model_config_to_json(c));
  EXPECT_NE(load_error(dir.str()).find("'model.embed_tokens.weight' has shape [50, 32], expected [60, 32]"), std::string::npos);
}

TEST(ModelBadInput, TruncatedWeightsFile) {
  TempDir dir;
  Model::random(tiny_config(), 1)->save(dir.str());
  std::string bytes = read_file(dir.path() / "model.safetensors");
  write_file(dir.path() / "model.safetensors", bytes.substr(0, bytes.size() / 2));
  EXPECT_NE(load_error(dir.str()).find("beyond the data section"), std::string::npos);
}

TEST(ModelBadInput, ForwardRejectsBadRequestsAndKeepsCache) {
  auto m = Model::random(tiny_config(), 1);
  KVCache cache = m->new_cache(16);
  ForwardRequest ok;
  ok.tokens = {1, 2, 3};
  m->forward(ok, cache);
  auto expect_rejected = [&](ForwardRequest r, const std::string& needle) {
    try {
      m->forward(r, cache);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(cache.size(), 3);
  };
  ForwardRequest r;
  r.tokens = {50};
  expect_rejected(r, "token id 50 outside the vocabulary");
  r.tokens = {-1};
  expect_rejected(r, "token id -1 outside the vocabulary");
  r.tokens = {};
  expect_rejected(r, "no tokens");
  r.tokens = std::vector<int32_t>(14, 4);
  expect_rejected(r, "exceeds the KV cache capacity of 16");
  r.tokens = {4};
  r.positions = {64};
  expect_rejected(r, "position 64 outside");
  r.positions = {3, 4};
  expect_rejected(r, "2 positions for 1 tokens");
  r.positions = {};
  r.mask = AttentionMask(1, 3, true);
  expect_rejected(r, "mask must be [1, 4]");
  r.mask = AttentionMask(1, 4, false);
  expect_rejected(r, "attends to nothing");
  r.mask = AttentionMask();
  r.logits_rows = std::vector<int64_t>{1};
  expect_rejected(r, "logits row 1 outside");
}

// Plain decoding as the client runs it: the none drafter through the round
// loop with the local verifier.
RoundLoopResult local_none(const std::shared_ptr<const Model>& m, const std::vector<int32_t>& prompt,
                           const GenerateOptions& o) {
  const std::unique_ptr<Drafter> none = find_drafter("none").make({});
  return decode_locally(m, *none, prompt, o);
}

TEST(ModelBadInput, GenerateRejectsPromptsThatCannotRun) {
  auto m = Model::random(tiny_config(), 1);
  GenerateOptions o;
  auto error_of = [&](const std::vector<int32_t>& prompt, const GenerateOptions& opts) {
    return test::error_of([&] { local_none(m, prompt, opts); });
  };
  EXPECT_NE(error_of({}, o).find("prompt is empty"), std::string::npos);
  EXPECT_NE(error_of(std::vector<int32_t>(64, 3), o).find("does not fit the model's context of 64"), std::string::npos);
  EXPECT_NE(error_of({1, 99}, o).find("prompt token id 99 outside the vocabulary"), std::string::npos);
  GenerateOptions bad = o;
  bad.sampling.temperature = 1.0f;
  bad.sampling.top_p = 0.0f;
  EXPECT_NE(error_of({1}, bad).find("top-p"), std::string::npos);
}

TEST(LocalNone, StopsAtContextEndAndAtEosAsTheTargetAlone) {
  auto m = Model::random(tiny_config(), 4);
  GenerateOptions o;
  o.max_new_tokens = 1000;
  o.ignore_eos = true;
  const RoundLoopResult g = local_none(m, {1, 2, 3}, o);
  EXPECT_EQ(g.ids.size(), 61u);  // context 64
  EXPECT_EQ(g.finish, FinishReason::kContext);  // the context ran out before max_new_tokens
  EXPECT_EQ(g.stats.rounds, 61);
  EXPECT_EQ(g.ids, target_alone(*m, {1, 2, 3}, o).output_ids);

  // Stop on EOS: make the model's EOS the token it predicts first.
  ModelConfig c = tiny_config();
  c.eos_token_id = g.ids[0];
  TempDir dir;
  m->save(dir.str());
  write_file(dir.path() / "config.json", model_config_to_json(c));
  std::shared_ptr<const Model> m2 = Model::load(dir.str());
  o.ignore_eos = false;
  const RoundLoopResult e = local_none(m2, {1, 2, 3}, o);
  EXPECT_EQ(e.ids, std::vector<int32_t>{g.ids[0]});
  EXPECT_EQ(e.finish, FinishReason::kEos);
}

TEST(LocalNone, SeededSamplingIsReproducibleAndIsTheTargetsOwnSampling) {
  auto m = Model::random(tiny_config(), 5);
  GenerateOptions o;
  o.max_new_tokens = 20;
  o.sampling.temperature = 1.0f;
  o.sampling.seed = 42;
  auto a = local_none(m, {1}, o).ids;
  auto b = local_none(m, {1}, o).ids;
  EXPECT_EQ(a, target_alone(*m, {1}, o).output_ids) << "an empty tree is one plain sampling step";
  o.sampling.seed = 43;
  auto c = local_none(m, {1}, o).ids;
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

}  // namespace splitspec::test

namespace splitspec::test {

// Half and bfloat16 weights widen to float exactly and go through the float
// kernels' one sequence: an F16 model computes bit for bit what its F32
// widening computes (so keeping the shipped F16 weights as they are changed
// no token).
TEST(Model, HalfWeightsComputeExactlyAsTheirFloatWidening) {
  TempDir dir;
  auto m = Model::random(tiny_config(50, 2), 4);
  for (WType t : {WType::F16, WType::BF16}) {
    m->save(dir.str(wtype_name(t)), t);
    const auto stored = Model::load(dir.str(wtype_name(t)));
    const auto widened = Model::load(dir.str(wtype_name(t)), WType::F32);
    ASSERT_EQ(stored->weight_type(), t);
    ASSERT_EQ(widened->weight_type(), WType::F32);
    const std::vector<int32_t> toks = {1, 5, 9, 33, 2, 49, 7, 8};
    EXPECT_TRUE(same_values(logits_for(*stored, toks), logits_for(*widened, toks))) << wtype_name(t);
  }
}

}  // namespace splitspec::test

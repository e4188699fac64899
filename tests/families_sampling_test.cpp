// Exactness under sampling on family targets loaded from GGUF files: a Llama 3
// target (its RoPE frequency divisors), a Qwen2 target (query, key and value
// biases) and a Qwen3.5 target (delta-rule layers, whose states roll back;
// its own MTP block drafting too),
// each with a draft of its vocabulary, keep the target's own distribution of
// the first two tokens in every drafter x verifier pairing.
// Greedy exactness against llama.cpp with the families' real vocabularies is
// tests/families/families_test.py.
#include <gtest/gtest.h>

#include <random>

#include "client/client.h"
#include "common/model/model.h"
#include "common/convert/gguf_convert.h"
#include "common/weights/gguf.h"
#include "tests/edge_cloud_util.h"
#include "tests/test_util.h"

namespace splitspec::test {
namespace {

std::string write_family(const TempDir& dir, const std::string& name, const std::string& arch, int64_t layers,
                         uint64_t seed) {
  // Qwen3.5's file carries an MTP block, as its models do: an attention
  // layer past the decoder's (nextn_predict_layers 1) with its projections.
  const bool mtp = arch == "qwen35";
  ModelConfig c = mtp ? tiny_qwen35_config(12, 2 * layers + 1) : tiny_config(12, layers, arch == "qwen2");
  if (mtp) c.recurrent_layers.back() = 0;
  c.architecture = arch;
  c.attention_bias = arch == "qwen2";
  if (arch == "llama") c.rope_freq_factors = llama3_rope_factors(500000.0, c.head_dim, 8.0, 1.0, 4.0, 16);
  const std::string path = dir.str(name + ".gguf");
  const auto m = Model::random(c, seed);
  const int64_t H = c.hidden_size;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 0.2f);
  std::vector<float> eh(static_cast<size_t>(2 * H * H)), gains(static_cast<size_t>(H), 1.0f);
  for (float& x : eh) x = normal(rng);
  const std::string blk = "blk." + std::to_string(c.num_hidden_layers - 1) + ".";
  write_gguf(m->config(), m->weight_set(), name, [&](GgufWriter& g) {
    if (!mtp) return;
    g.add_u32(arch + ".nextn_predict_layers", 1);
    g.add_tensor(blk + "nextn.eh_proj.weight", {2 * H, H}, GgmlType::kF32, eh.data(), eh.size() * 4);
    for (const char* norm : {"nextn.enorm.weight", "nextn.hnorm.weight"})
      g.add_tensor(blk + norm, {H}, GgmlType::kF32, gains.data(), gains.size() * 4);
  }, path, std::nullopt);
  return path;
}

class FamilySampling : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilySampling, EveryDrafterAndVerifierKeepsTheTargetsDistribution) {
  TempDir dir;
  const std::string target_path = write_family(dir, "target", GetParam(), 2, 31);
  const std::string draft_path = write_family(dir, "draft", GetParam(), 1, 32);
  const auto target = Model::load(target_path);
  LocalServer srv = start_server(target_path);
  const std::vector<int32_t> prompt = {1, 5, 7};
  Request req;
  req.max_new_tokens = 2;
  req.ignore_eos = true;
  req.temperature = 0.05f;  // random weights give flat logits: sharpen them
  struct Pairing {
    std::string drafter;
    bool server;
  };
  uint64_t seed = 40000;
  std::vector<Pairing> pairings{{"model", false}, {"model", true}, {"lut", true}, {"pld", false}};
  if (GetParam() == "qwen35") pairings.insert(pairings.end(), {{"mtp", false}, {"mtp", true}});
  for (const Pairing& p : pairings) {
    SCOPED_TRACE(p.drafter + (p.server ? " on the server" : " here"));
    ClientOptions o;
    o.drafter = p.drafter;
    if (p.drafter == "model") o.draft_dir = draft_path;
    if (p.drafter == "mtp") o.drafter_options["head"] = target_path;
    auto client = Client::connect(with_verifier(o, p.server ? srv.address : "", target_path));
    int64_t accepted = 0;
    expect_targets_two_token_distribution(*client, *target, prompt, req, 2000, seed += 10000, [&](const Result& r) {
      EXPECT_EQ(r.ids.size(), 2u);
      accepted += r.stats.accepted_tokens;
    });
    if (p.drafter == "model" || p.drafter == "mtp") {
      EXPECT_GT(accepted, 0) << "drafts should be accepted sometimes";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilySampling, ::testing::Values("llama", "qwen2", "qwen35"));

}  // namespace
}  // namespace splitspec::test

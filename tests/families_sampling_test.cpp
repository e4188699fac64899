// Exactness under sampling on family targets loaded from GGUF files: a Llama 3
// target (its RoPE frequency divisors), a Qwen2 target (query, key and value
// biases; an EAGLE-3 head drafting for the Llama 3 one too), a Qwen3.5
// target (delta-rule layers, whose states roll back; its own MTP block
// drafting too) and a Gemma 4 target (shared keys, per-layer inputs,
// soft-capped logits; its assistant drafting too), each with a draft of its
// vocabulary, keep the target's own distribution of the first two tokens in
// every drafter x verifier pairing.
// Greedy exactness against llama.cpp with the families' real vocabularies is
// tests/families/families_test.py.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
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
  if (arch == "gemma4") c = tiny_gemma4_config(12);
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

// An EAGLE-3 head for a tiny_config target (hidden 32) in llama.cpp's
// draft-eagle3 layout: random weights, a draft vocabulary of 8 of the 12
// target ids (d2t), the target's embedding.
std::string write_eagle3_head(const TempDir& dir, uint64_t seed) {
  const int64_t H = 32, Q = 32, KV = 16, I = 64, nd = 8;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<std::vector<float>> keep;
  GgufWriter g;
  g.add_string("general.architecture", "eagle3");
  const std::string k = "eagle3.";
  g.add_u32(k + "embedding_length", H);
  g.add_u32(k + "feed_forward_length", I);
  g.add_u32(k + "block_count", 1);
  g.add_u32(k + "attention.head_count", 4);
  g.add_u32(k + "attention.head_count_kv", 2);
  g.add_u32(k + "context_length", 64);
  g.add_f32(k + "rope.freq_base", 10000.0f);
  g.add_f32(k + "attention.layer_norm_rms_epsilon", 1e-5f);
  g.add_i32s(k + "target_layers", {1, 2, 2});  // the second layer's input, the final state twice
  g.add_u32(k + "target_hidden_size", H);
  auto tensor = [&](const std::string& name, std::vector<int64_t> ne, bool gain = false) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    keep.emplace_back(static_cast<size_t>(n));
    for (float& x : keep.back()) x = gain ? 1.0f : normal(rng);
    g.add_tensor(name, ne, GgmlType::kF32, keep.back().data(), static_cast<uint64_t>(n) * 4);
  };
  tensor("fc.weight", {3 * H, H});
  tensor("blk.0.attn_norm.weight", {H}, true);
  tensor("blk.0.attn_norm_2.weight", {H}, true);
  tensor("blk.0.attn_q.weight", {2 * H, Q});
  tensor("blk.0.attn_k.weight", {2 * H, KV});
  tensor("blk.0.attn_v.weight", {2 * H, KV});
  tensor("blk.0.attn_output.weight", {Q, H});
  tensor("blk.0.ffn_norm.weight", {H}, true);
  tensor("blk.0.ffn_gate.weight", {H, I});
  tensor("blk.0.ffn_up.weight", {H, I});
  tensor("blk.0.ffn_down.weight", {I, H});
  tensor("output_norm.weight", {H}, true);
  tensor("output.weight", {H, nd});
  const std::vector<int64_t> d2t = {0, 2, 3, 5, 6, 8, 9, 11};
  g.add_tensor("d2t", {nd}, GgmlType::kI64, d2t.data(), d2t.size() * sizeof(int64_t));
  const std::string path = dir.str("eagle3.gguf");
  g.write(path);
  return path;
}

// Gemma 4's assistant for tiny_gemma4_config's target (hidden 32; its
// layers 6 and 7, local and global, read the keys of layers 2 and 3) in
// llama.cpp's gemma4-assistant layout: random weights, 16 wide, one local
// and one global layer, its own tied head.
std::string write_assistant(const TempDir& dir, uint64_t seed) {
  const int64_t H = 16, Ht = 32, I = 32, heads = 4;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<std::vector<float>> keep;
  GgufWriter g;
  g.add_string("general.architecture", "gemma4-assistant");
  const std::string k = "gemma4-assistant.";
  g.add_u32(k + "context_length", 64);
  g.add_u32(k + "embedding_length", H);
  g.add_u32(k + "embedding_length_out", Ht);
  g.add_u32(k + "block_count", 2);
  g.add_u32(k + "nextn_predict_layers", 2);
  g.add_u32(k + "feed_forward_length", I);
  g.add_u32(k + "attention.head_count", heads);
  g.add_i32s(k + "attention.head_count_kv", {1, 2});
  g.add_u32(k + "attention.key_length", 16);
  g.add_u32(k + "attention.value_length", 16);
  g.add_u32(k + "attention.key_length_swa", 8);
  g.add_u32(k + "attention.value_length_swa", 8);
  g.add_u32(k + "rope.dimension_count", 16);
  g.add_u32(k + "rope.dimension_count_swa", 8);
  g.add_f32(k + "rope.freq_base", 1000000.0f);
  g.add_f32(k + "rope.freq_base_swa", 100.0f);
  g.add_u32(k + "attention.sliding_window", 4);
  GgufValue local;
  local.type = GgufType::kArray;
  local.elem = GgufType::kBool;
  local.nums = {1, 0};
  g.add_value(k + "attention.sliding_window_pattern", local);
  g.add_f32(k + "attention.layer_norm_rms_epsilon", 1e-6f);
  auto tensor = [&](const std::string& name, std::vector<int64_t> ne, bool gain = false) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    keep.emplace_back(static_cast<size_t>(n));
    for (float& x : keep.back()) x = gain ? 1.0f + normal(rng) * 0.1f : normal(rng);
    g.add_tensor(name, ne, GgmlType::kF32, keep.back().data(), static_cast<uint64_t>(n) * 4);
  };
  tensor("token_embd.weight", {H, 12});
  tensor("output_norm.weight", {H}, true);
  tensor("nextn.pre_projection.weight", {2 * Ht, H});
  tensor("nextn.post_projection.weight", {H, Ht});
  keep.push_back({1.0f, 1.0f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f});
  g.add_tensor("rope_freqs.weight", {8}, GgmlType::kF32, keep.back().data(), 8 * 4);
  for (int l = 0; l < 2; ++l) {
    const int64_t D = l == 0 ? 8 : 16;
    const std::string b = "blk." + std::to_string(l) + ".";
    tensor(b + "attn_norm.weight", {H}, true);
    tensor(b + "attn_q.weight", {H, heads * D});
    tensor(b + "attn_q_norm.weight", {D}, true);
    tensor(b + "attn_output.weight", {heads * D, H});
    tensor(b + "post_attention_norm.weight", {H}, true);
    tensor(b + "layer_output_scale.weight", {1}, true);
    tensor(b + "ffn_norm.weight", {H}, true);
    tensor(b + "ffn_gate.weight", {H, I});
    tensor(b + "ffn_up.weight", {H, I});
    tensor(b + "ffn_down.weight", {I, H});
    tensor(b + "post_ffw_norm.weight", {H}, true);
  }
  const std::string path = dir.str("assistant.gguf");
  g.write(path);
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
    std::map<std::string, std::string> options = {};
  };
  uint64_t seed = 40000;
  std::vector<Pairing> pairings{{"model", false}, {"model", true}, {"lut", true}, {"pld", false}};
  // A shortlist of half the vocabulary: the drafts' q is zero on the rest.
  std::ofstream(dir.str("ranking.json")) << "[5, 7, 1, 11, 0, 8]";
  if (GetParam() == "qwen35")
    pairings.insert(pairings.end(), {{"mtp", false}, {"mtp", true},
                                     {"mtp", true, {{"shortlist", "6"}, {"ranking", dir.str("ranking.json")}}}});
  if (GetParam() == "llama") pairings.insert(pairings.end(), {{"eagle3", false}, {"eagle3", true}});
  if (GetParam() == "gemma4") pairings.push_back({"assistant", false});
  const std::string eagle3 = GetParam() == "llama" ? write_eagle3_head(dir, 33) : "";
  const std::string assistant = GetParam() == "gemma4" ? write_assistant(dir, 34) : "";
  for (const Pairing& p : pairings) {
    SCOPED_TRACE(p.drafter + (p.options.empty() ? "" : " with options") + (p.server ? " on the server" : " here"));
    ClientOptions o;
    o.drafter = p.drafter;
    o.drafter_options = p.options;
    if (p.drafter == "model") o.draft_dir = draft_path;
    if (p.drafter == "mtp") o.drafter_options["head"] = target_path;
    if (p.drafter == "eagle3") {
      o.drafter_options["head"] = eagle3;
      o.drafter_options["target"] = target_path;
    }
    if (p.drafter == "assistant") o.drafter_options["head"] = assistant;
    auto client = Client::connect(with_verifier(o, p.server ? srv.address : "", target_path));
    int64_t accepted = 0;
    expect_targets_two_token_distribution(*client, *target, prompt, req, 2000, seed += 10000, [&](const Result& r) {
      EXPECT_EQ(r.ids.size(), 2u);
      accepted += r.stats.accepted_tokens;
    });
    if (p.drafter == "model" || p.drafter == "mtp" || p.drafter == "eagle3" || p.drafter == "assistant") {
      EXPECT_GT(accepted, 0) << "drafts should be accepted sometimes";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilySampling, ::testing::Values("llama", "qwen2", "qwen35", "gemma4"));

}  // namespace
}  // namespace splitspec::test

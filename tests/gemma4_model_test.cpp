// Gemma 4's decoder on the CPU: layers of two head sizes, layers reading
// earlier layers' keys and values, per-layer inputs and soft-capped logits
// keep every way of reaching a point of a sequence (steps, chunks, one
// prefill, a tree's branch, a batch, a rollback) bitwise alike, and the
// cache holds keys and values only for the layers that compute them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/decoding/token_tree.h"
#include "common/model/model.h"
#include "common/weights/gguf.h"
#include "common/util/error.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

// Longer than the local layers' window (4), so they see only part of it.
const std::vector<int32_t> kGemmaPrompt = {1, 17, 4, 30, 11, 8, 23, 42, 5, 19};

Rows gemma_run(const Model& m, KVCache& cache, const std::vector<int32_t>& tokens) {
  ForwardRequest r;
  r.tokens = tokens;
  return m.forward(r, cache).logits;
}

bool gemma_same(const Rows& a, const Rows& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.rows() * a.cols()) * sizeof(float)) == 0;
}

// The live keys and values of every layer that has its own.
std::vector<uint8_t> gemma_snapshot(const Model& m, const KVCache& cache) {
  const ModelConfig& c = m.config();
  std::vector<uint8_t> out;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.layer_has_kv(l)) continue;
    for (const void* kv : {cache.keys(l), cache.values(l)})
      for (int64_t h = 0; h < c.layer_kv_heads(l); ++h) {
        const auto* b = reinterpret_cast<const uint8_t*>(static_cast<const float*>(kv) + h * cache.head_stride(l));
        out.insert(out.end(), b, b + cache.size() * c.layer_head_dim(l) * sizeof(float));
      }
  }
  return out;
}

std::shared_ptr<Model> gemma4(uint64_t seed, WType type = WType::F32) {
  return Model::random(tiny_gemma4_config(), seed, type, 0.2f);
}

}  // namespace

TEST(Gemma4Model, StepsChunksAndOnePrefillAreBitwiseEqual) {
  for (WType type : {WType::F32, WType::Q8_0}) {
    auto m = gemma4(3, type);
    KVCache one = m->new_cache();
    const Rows all = gemma_run(*m, one, kGemmaPrompt);
    KVCache steps = m->new_cache();
    std::vector<Rows> rows;
    for (int32_t t : kGemmaPrompt) rows.push_back(gemma_run(*m, steps, {t}));
    EXPECT_TRUE(gemma_same(concat(rows), all)) << wtype_name(type);
    KVCache chunks = m->new_cache();
    const Rows a = gemma_run(*m, chunks, {kGemmaPrompt.begin(), kGemmaPrompt.begin() + 6});
    const Rows b = gemma_run(*m, chunks, {kGemmaPrompt.begin() + 6, kGemmaPrompt.end()});
    EXPECT_TRUE(gemma_same(concat({a, b}), all)) << wtype_name(type);
    EXPECT_EQ(gemma_snapshot(*m, one), gemma_snapshot(*m, steps));
    EXPECT_EQ(gemma_snapshot(*m, one), gemma_snapshot(*m, chunks));
    // Soft-capped: no logit reaches the cap.
    for (int64_t e = 0; e < all.rows() * all.cols(); ++e) ASSERT_LT(std::fabs(all.data()[e]), 30.0f);
  }
}

TEST(Gemma4Model, ATreeNodeIsItsBranchAsAChain) {
  auto m = gemma4(5);
  const std::vector<int32_t> prefix(kGemmaPrompt.begin(), kGemmaPrompt.begin() + 7);
  DraftTree tree;
  tree.tokens = {11, 12, 13, 14, 15, 16, 17};
  tree.parents = {-1, 0, 0, 1, -1, 4, 3};
  KVCache cache = m->new_cache();
  gemma_run(*m, cache, prefix);
  ForwardRequest r;
  r.tokens = tree.tokens;
  for (int d : tree.depths()) r.positions.push_back(7 + d - 1);
  r.mask = tree_attention_mask(tree.parents, 7);
  const Rows got = m->forward(r, cache).logits;
  for (int node = 0; node < static_cast<int>(tree.tokens.size()); ++node) {
    std::vector<int32_t> path;
    for (int i = node; i >= 0; i = tree.parents[static_cast<size_t>(i)]) path.insert(path.begin(), tree.tokens[i]);
    KVCache chain = m->new_cache();
    gemma_run(*m, chain, prefix);
    const Rows want = gemma_run(*m, chain, path);
    EXPECT_TRUE(gemma_same(got.slice(node, 1), want.slice(want.rows() - 1, 1))) << "node " << node;
  }
}

TEST(Gemma4Model, AVerificationRejectedEverywhereRollsBackBitwise) {
  auto m = gemma4(7);
  const std::vector<int32_t> prefix(kGemmaPrompt.begin(), kGemmaPrompt.begin() + 6);
  for (int64_t accepted : {0, 2}) {
    KVCache cache = m->new_cache();
    gemma_run(*m, cache, prefix);
    gemma_run(*m, cache, {40, 41, 42, 43, 44});
    cache.truncate(6 + accepted);
    KVCache alone = m->new_cache();
    std::vector<int32_t> kept = prefix;
    for (int64_t i = 0; i < accepted; ++i) kept.push_back(40 + static_cast<int32_t>(i));
    gemma_run(*m, alone, kept);
    EXPECT_EQ(gemma_snapshot(*m, cache), gemma_snapshot(*m, alone)) << accepted;
    EXPECT_TRUE(gemma_same(gemma_run(*m, cache, {9}), gemma_run(*m, alone, {9}))) << accepted;
  }
}

TEST(Gemma4Model, ABatchOfSequencesIsEachAlone) {
  auto m = gemma4(11);
  KVCache a = m->new_cache(), b = m->new_cache(), a1 = m->new_cache(), b1 = m->new_cache();
  gemma_run(*m, a, {1, 2, 3, 4, 5});
  gemma_run(*m, a1, {1, 2, 3, 4, 5});
  ForwardRequest ra, rb;
  ra.tokens = {4, 5};
  rb.tokens = {7, 8, 9, 10, 12, 13};
  const auto both = m->forward_batch({{&ra, &a}, {&rb, &b}});
  EXPECT_TRUE(gemma_same(both[0].logits, m->forward(ra, a1).logits));
  EXPECT_TRUE(gemma_same(both[1].logits, m->forward(rb, b1).logits));
  EXPECT_EQ(gemma_snapshot(*m, a), gemma_snapshot(*m, a1));
  EXPECT_EQ(gemma_snapshot(*m, b), gemma_snapshot(*m, b1));
}

TEST(Gemma4Model, OnlyLayersWithTheirOwnKeysAreCachedAndTheSharingOnesReadThem) {
  const ModelConfig c = tiny_gemma4_config();
  // Layers 0-3 hold keys and values: three local (1 head of 8), one global
  // (2 heads of 16); 4-7 read layer 2's (local) or 3's (global).
  EXPECT_EQ(KVCache::bytes_per_position(c, KVType::F32), 2u * (3 * 8 + 2 * 16) * sizeof(float));
  EXPECT_EQ(c.kv_source_layer(4), 2);
  EXPECT_EQ(c.kv_source_layer(7), 3);
  auto m = gemma4(13);
  KVCache cache = m->new_cache();
  gemma_run(*m, cache, kGemmaPrompt);
  EXPECT_EQ(cache.keys(4), cache.keys(2));
  EXPECT_EQ(cache.values(7), cache.values(3));
  EXPECT_EQ(cache.head_stride(3), cache.capacity() * 16);
  EXPECT_EQ(cache.head_stride(0), cache.capacity() * 8);
  // The global layer whose value is its key's projection stores no value
  // matrix; the sharing layers store neither.
  const WeightSet& w = m->weight_set();
  EXPECT_EQ(w.layers[3][static_cast<int>(LayerMatrix::kV)].data, nullptr);
  EXPECT_NE(w.layers[3][static_cast<int>(LayerMatrix::kK)].data, nullptr);
  EXPECT_EQ(w.layers[5][static_cast<int>(LayerMatrix::kK)].data, nullptr);
  EXPECT_NE(w.per_layer.embed.data, nullptr);
}

TEST(Gemma4ModelBadInput, SharingWithALayerOfAnotherKindIsRefusedByName) {
  ModelConfig c = tiny_gemma4_config();
  c.shared_kv_layers = 5;  // layer 3 would read layer 1's (local) keys as a global layer's
  EXPECT_THROW(
      {
        try {
          c.validate("cfg");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("share the keys and values of layer"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  c = tiny_gemma4_config();
  c.layer_intermediate_sizes = {64, 64};
  EXPECT_THROW(c.validate("cfg"), Error);
  c = tiny_gemma4_config();
  c.final_logit_softcap = -1;
  EXPECT_THROW(c.validate("cfg"), Error);
}

TEST(Gemma4ModelBadInput, AFileOfNoLayersIsRefusedInsteadOfSized) {
  TempDir dir;
  for (uint32_t layers : {0u, 100000u}) {
    GgufWriter g;
    g.add_string("general.architecture", "gemma4");
    g.add_u32("gemma4.embedding_length", 32);
    g.add_u32("gemma4.block_count", layers);
    g.add_u32("gemma4.attention.head_count", 4);
    g.add_u32("gemma4.feed_forward_length", 64);
    g.add_u32("gemma4.context_length", 64);
    std::vector<float> embed(32 * 12, 0.5f);
    g.add_tensor("token_embd.weight", {32, 12}, GgmlType::kF32, embed.data(), embed.size() * 4);
    const std::string path = dir.str("bad.gguf");
    g.write(path);
    try {
      load_model_config(path);
      ADD_FAILURE() << layers << " layers were accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not a layer count"), std::string::npos) << e.what();
    }
  }
}

}  // namespace splitspec::test

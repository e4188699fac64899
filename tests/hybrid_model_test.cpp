// Qwen3.5's hybrid decoder on the CPU: its delta-rule layers carry a
// recurrent state, and every way of reaching a point of a sequence (steps,
// chunks, one prefill, a tree's branch, a batch, a rollback, a compaction, a
// fork) gives the same logits and the same state, bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "common/decoding/token_tree.h"
#include "common/model/model.h"
#include "common/util/error.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

const std::vector<int32_t> kPrompt = {1, 17, 4, 30, 11, 8, 23, 42, 5};

Rows run(const Model& m, KVCache& cache, const std::vector<int32_t>& tokens) {
  ForwardRequest r;
  r.tokens = tokens;
  return m.forward(r, cache).logits;
}

bool same(const Rows& a, const Rows& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.rows() * a.cols()) * sizeof(float)) == 0;
}

// Everything the cache holds for its next forward: the delta-rule layers'
// states after its entries, and the attention layers' live keys and values.
std::vector<uint8_t> snapshot(const Model& m, const KVCache& cache) {
  const ModelConfig& c = m.config();
  std::vector<uint8_t> out;
  auto add = [&](const void* p, size_t bytes) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + bytes);
  };
  const float* state = cache.states().find(cache.size());
  EXPECT_NE(state, nullptr);
  if (state) add(state, static_cast<size_t>(cache.states().floats()) * sizeof(float));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_is_recurrent(l)) continue;
    for (const void* kv : {cache.keys(l), cache.values(l)})
      for (int64_t h = 0; h < c.num_key_value_heads; ++h)
        add(static_cast<const float*>(kv) + h * cache.head_stride(l),
            static_cast<size_t>(cache.size() * c.head_dim) * sizeof(float));
  }
  return out;
}

std::shared_ptr<Model> hybrid(uint64_t seed, WType type = WType::F32) {
  return Model::random(tiny_qwen35_config(), seed, type, 0.2f);
}

// A tree after `past` entries: its forward request.
ForwardRequest tree_request(const DraftTree& tree, int64_t past) {
  ForwardRequest r;
  r.tokens = tree.tokens;
  for (int d : tree.depths()) r.positions.push_back(past + d - 1);
  r.mask = tree_attention_mask(tree.parents, past);
  return r;
}

std::vector<int32_t> path_to(const DraftTree& tree, int node) {
  std::vector<int32_t> path;
  for (int i = node; i >= 0; i = tree.parents[static_cast<size_t>(i)]) path.insert(path.begin(), tree.tokens[i]);
  return path;
}

}  // namespace

TEST(HybridModel, StepsChunksAndOnePrefillAreBitwiseEqual) {
  for (WType type : {WType::F32, WType::Q8_0}) {
    auto m = hybrid(3, type);
    ASSERT_TRUE(m->config().has_recurrent_layers());
    KVCache one = m->new_cache();
    const Rows all = run(*m, one, kPrompt);
    KVCache steps = m->new_cache();
    std::vector<Rows> rows;
    for (int32_t t : kPrompt) rows.push_back(run(*m, steps, {t}));
    EXPECT_TRUE(same(concat(rows), all)) << wtype_name(type);
    KVCache chunks = m->new_cache();
    const Rows a = run(*m, chunks, {kPrompt.begin(), kPrompt.begin() + 4});
    const Rows b = run(*m, chunks, {kPrompt.begin() + 4, kPrompt.end()});
    EXPECT_TRUE(same(concat({a, b}), all)) << wtype_name(type);
    EXPECT_EQ(snapshot(*m, one), snapshot(*m, steps));
    EXPECT_EQ(snapshot(*m, one), snapshot(*m, chunks));
  }
}

TEST(HybridModel, ATreeNodeIsItsBranchAsAChain) {
  auto m = hybrid(5);
  const std::vector<int32_t> prefix(kPrompt.begin(), kPrompt.begin() + 5);
  DraftTree tree;
  tree.tokens = {11, 12, 13, 14, 15, 16, 17};
  tree.parents = {-1, 0, 0, 1, -1, 4, 2};
  KVCache cache = m->new_cache();
  run(*m, cache, prefix);
  const Rows got = m->forward(tree_request(tree, 5), cache).logits;
  for (int node = 0; node < static_cast<int>(tree.tokens.size()); ++node) {
    KVCache chain = m->new_cache();
    run(*m, chain, prefix);
    const Rows want = run(*m, chain, path_to(tree, node));
    EXPECT_TRUE(same(got.slice(node, 1), want.slice(want.rows() - 1, 1))) << "node " << node;
  }
}

TEST(HybridModel, AVerificationRejectedEverywhereRollsBackBitwise) {
  auto m = hybrid(7);
  const std::vector<int32_t> prefix(kPrompt.begin(), kPrompt.begin() + 6);
  for (int64_t accepted : {0, 1, 3}) {
    KVCache cache = m->new_cache();
    run(*m, cache, prefix);
    run(*m, cache, {40, 41, 42, 43, 44});
    cache.truncate(6 + accepted);
    KVCache alone = m->new_cache();
    std::vector<int32_t> kept = prefix;
    for (int64_t i = 0; i < accepted; ++i) kept.push_back(40 + static_cast<int32_t>(i));
    run(*m, alone, kept);
    EXPECT_EQ(snapshot(*m, cache), snapshot(*m, alone)) << accepted;
    EXPECT_TRUE(same(run(*m, cache, {9}), run(*m, alone, {9}))) << accepted;
  }
}

TEST(HybridModel, KeepCompactsATreeToItsPathWithThePathsState) {
  auto m = hybrid(9);
  const std::vector<int32_t> prefix(kPrompt.begin(), kPrompt.begin() + 4);
  DraftTree tree;
  tree.tokens = {11, 12, 13, 14, 15};
  tree.parents = {-1, -1, 1, 1, 3};  // accepted path: 1 -> 3 -> 4
  KVCache cache = m->new_cache();
  run(*m, cache, prefix);
  m->forward(tree_request(tree, 4), cache);
  cache.keep(4, {1, 3, 4});
  KVCache chain = m->new_cache();
  run(*m, chain, {1, 17, 4, 30, 12, 14, 15});
  EXPECT_EQ(snapshot(*m, cache), snapshot(*m, chain));
  EXPECT_TRUE(same(run(*m, cache, {20}), run(*m, chain, {20})));
}

TEST(HybridModel, ABatchOfSequencesIsEachAlone) {
  auto m = hybrid(11);
  KVCache a = m->new_cache(), b = m->new_cache(), a1 = m->new_cache(), b1 = m->new_cache();
  run(*m, a, {1, 2, 3});
  run(*m, a1, {1, 2, 3});
  ForwardRequest ra, rb;
  ra.tokens = {4, 5};
  rb.tokens = {7, 8, 9, 10};
  const auto both = m->forward_batch({{&ra, &a}, {&rb, &b}});
  EXPECT_TRUE(same(both[0].logits, m->forward(ra, a1).logits));
  EXPECT_TRUE(same(both[1].logits, m->forward(rb, b1).logits));
  EXPECT_EQ(snapshot(*m, a), snapshot(*m, a1));
  EXPECT_EQ(snapshot(*m, b), snapshot(*m, b1));
}

TEST(HybridModel, AForkContinuesAsItsSource) {
  auto m = hybrid(13);
  KVCache src = m->new_cache();
  run(*m, src, kPrompt);
  KVCache fork = src.fork(src.size());
  EXPECT_EQ(snapshot(*m, fork), snapshot(*m, src));
  EXPECT_TRUE(same(run(*m, fork, {3, 4}), run(*m, src, {3, 4})));
  // A delta-rule layer holds no keys or values: its cache is the attention
  // layers' and the states.
  EXPECT_EQ(KVCache::bytes_per_position(m->config(), KVType::F32),
            static_cast<size_t>(2 * 1 * m->config().num_key_value_heads * m->config().head_dim * 4));
}

TEST(HybridModel, StatesStayWithinWhatAServerReservesForThem) {
  auto m = hybrid(17);
  m->set_state_window(4);
  const ModelConfig& c = m->config();
  const size_t bound = KVCache::state_bytes(c, 4, 5);
  EXPECT_EQ(bound, static_cast<size_t>(3 * c.ssm_state_floats()) * sizeof(float) * (2 * 4 + 5 + 1));
  EXPECT_EQ(KVCache::state_bytes(tiny_config(), 4, 5), 0u);
  KVCache cache = m->new_cache();
  run(*m, cache, kPrompt);
  EXPECT_LE(cache.states().bytes(), bound);
  // Rounds of the last token and four drafts, one or none accepted: more
  // rows than the window, all of which a verification may roll back to.
  for (int round = 0; round < 8; ++round) {
    const int64_t past = cache.size();
    ForwardRequest r;
    r.tokens = {3, 4, 5, 6, 7};
    r.rollback_rows = 5;
    m->forward(r, cache);
    cache.truncate(past + 1 + round % 2);
    EXPECT_LE(cache.states().bytes(), bound) << round;
  }
  // Without rollback rows, a chain longer than the window keeps its last
  // rows' states only.
  ForwardRequest r;
  r.tokens = {3, 4, 5, 6, 7};
  const int64_t past = cache.size();
  m->forward(r, cache);
  EXPECT_NE(error_of([&] { cache.truncate(past + 1); }).find("not kept"), std::string::npos);
}

TEST(HybridModelBadInput, WhatTheStatesCannotFollowIsRefusedLeavingTheCache) {
  auto m = hybrid(15);
  m->set_state_window(3);
  KVCache cache = m->new_cache();
  for (int32_t t : kPrompt) run(*m, cache, {t});
  const std::vector<uint8_t> before = snapshot(*m, cache);
  // A row that skips an entry its parent saw follows no state.
  ForwardRequest r;
  r.tokens = {3, 4};
  r.mask = AttentionMask(2, cache.size() + 2);
  for (int64_t j = 0; j <= cache.size(); ++j) r.mask.row(0)[j] = 1;
  for (int64_t j = 1; j <= cache.size() + 1; ++j) r.mask.row(1)[j] = 1;
  EXPECT_NE(error_of([&] { m->forward(r, cache); }).find("must see"), std::string::npos);
  EXPECT_EQ(snapshot(*m, cache), before);
  // A row following an entry further back than the window keeps.
  ForwardRequest old;
  old.tokens = {3};
  old.mask = AttentionMask(1, cache.size() + 1);
  for (int64_t j = 0; j < cache.size() - 5; ++j) old.mask.row(0)[j] = 1;
  old.mask.row(0)[cache.size()] = 1;
  EXPECT_NE(error_of([&] { m->forward(old, cache); }).find("not kept"), std::string::npos);
  EXPECT_EQ(snapshot(*m, cache), before);
  // Further back than the window keeps.
  EXPECT_NE(error_of([&] { cache.truncate(cache.size() - 5); }).find("not kept"), std::string::npos);
  EXPECT_EQ(cache.size(), static_cast<int64_t>(kPrompt.size()));
  EXPECT_EQ(snapshot(*m, cache), before);
  cache.truncate(cache.size() - 3);
  KVCache alone = m->new_cache();
  run(*m, alone, {kPrompt.begin(), kPrompt.end() - 3});
  EXPECT_EQ(snapshot(*m, cache), snapshot(*m, alone));
}

}  // namespace splitspec::test

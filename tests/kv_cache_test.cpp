// KV-cache correctness: every way of reaching a cache state must give the
// logits a full recompute gives.
#include "common/model/kv_cache.h"

#include <gtest/gtest.h>

#include <random>

#include "common/decoding/token_tree.h"
#include "common/model/model.h"
#include "common/util/error.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

constexpr double kTol = 1e-4;

Rows run(const Model& m, KVCache& cache, const std::vector<int32_t>& tokens) {
  ForwardRequest r;
  r.tokens = tokens;
  return m.forward(r, cache).logits;
}

Rows full_logits(const Model& m, const std::vector<int32_t>& tokens) {
  KVCache cache = m.new_cache();
  return run(m, cache, tokens);
}

std::vector<int32_t> random_tokens(int n, int vocab, uint64_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

}  // namespace

TEST(KVCache, IncrementalDecodingEqualsFullRecompute) {
  for (uint64_t seed : {1, 2, 3}) {
    auto m = Model::random(tiny_config(50, 3), seed);
    const auto toks = random_tokens(20, 50, seed);
    const Rows full = full_logits(*m, toks);
    KVCache cache = m->new_cache(32);
    std::vector<int32_t> prefix(toks.begin(), toks.begin() + 7);
    std::vector<Rows> rows;
    rows.push_back(run(*m, cache, prefix));
    for (size_t i = 7; i < toks.size(); ++i) rows.push_back(run(*m, cache, {toks[i]}));
    EXPECT_TRUE(all_close(concat(rows), full, 0.0, kTol)) << "seed " << seed;
    EXPECT_EQ(cache.size(), 20);
  }
}

TEST(KVCache, TreeMaskForwardEqualsEachBranchAsAChain) {
  auto m = Model::random(tiny_config(50, 2), 7);
  const std::vector<int32_t> prefix = {1, 17, 4, 30, 11};
  // root -> 0 -> {1 -> 3, 2 -> 4}; root -> 5 -> 6 -> 7
  DraftTree tree;
  tree.tokens = {8, 9, 10, 21, 22, 40, 41, 42};
  tree.parents = {-1, 0, 0, 1, 2, -1, 5, 6};
  const auto depths = tree.depths();

  KVCache cache = m->new_cache();
  run(*m, cache, prefix);
  ForwardRequest r;
  r.tokens = tree.tokens;
  for (int d : depths) r.positions.push_back(static_cast<int64_t>(prefix.size()) + d - 1);
  r.mask = tree_attention_mask(tree.parents, cache.size());
  const Rows tree_logits = m->forward(r, cache).logits;

  for (int32_t node = 0; node < tree.size(); ++node) {
    std::vector<int32_t> branch;
    for (int32_t n = node; n >= 0; n = tree.parents[n]) branch.insert(branch.begin(), tree.tokens[n]);
    std::vector<int32_t> seq = prefix;
    seq.insert(seq.end(), branch.begin(), branch.end());
    const Rows chain = full_logits(*m, seq);
    EXPECT_TRUE(all_close(tree_logits.view().slice(node, 1), chain.view().slice(chain.rows() - 1, 1), 0.0, kTol))
        << "node " << node;
  }
}

TEST(KVCache, ChainTreeMaskIsTheCausalMask) {
  const AttentionMask tree = tree_attention_mask({-1, 0, 1, 2}, 3);
  ASSERT_EQ(tree.rows, 4);
  ASSERT_EQ(tree.cols, 7);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(tree.at(i, j), j < 3 + i + 1) << i << "," << j;
}

TEST(KVCache, RollbackThenReappendEqualsNeverAppended) {
  auto m = Model::random(tiny_config(50, 2), 8);
  const auto prefix = random_tokens(9, 50, 1), junk = random_tokens(6, 50, 2), real = random_tokens(4, 50, 3);
  KVCache a = m->new_cache();
  run(*m, a, prefix);
  run(*m, a, junk);
  a.truncate(9);
  const Rows after_rollback = run(*m, a, real);
  KVCache b = m->new_cache();
  run(*m, b, prefix);
  const Rows never = run(*m, b, real);
  EXPECT_TRUE(all_close(after_rollback, never, 0.0, kTol));
  EXPECT_EQ(a.size(), b.size());
}

TEST(KVCache, ForkedPrefixEqualsFreshCompute) {
  auto m = Model::random(tiny_config(50, 2), 9);
  const auto toks = random_tokens(12, 50, 4), cont = random_tokens(5, 50, 5);
  KVCache parent = m->new_cache();
  run(*m, parent, toks);
  KVCache child = parent.fork(8);
  EXPECT_EQ(child.size(), 8);
  const Rows forked = run(*m, child, cont);
  std::vector<int32_t> seq(toks.begin(), toks.begin() + 8);
  seq.insert(seq.end(), cont.begin(), cont.end());
  EXPECT_TRUE(all_close(forked, full_logits(*m, seq).slice(8, 5), 0.0, kTol));
  // The fork is independent: the parent still continues its own sequence.
  EXPECT_EQ(parent.size(), 12);
  std::vector<int32_t> pseq = toks;
  pseq.push_back(3);
  EXPECT_TRUE(all_close(run(*m, parent, {3}), full_logits(*m, pseq).slice(12, 1), 0.0, kTol));

  // Re-forking into existing storage (what worker threads do each round).
  KVCache reused = m->new_cache();
  run(*m, reused, random_tokens(20, 50, 6));
  reused.copy_prefix_from(parent, 8);
  EXPECT_TRUE(all_close(run(*m, reused, cont), forked, 0.0, kTol));
}

TEST(KVCache, KeepCompactsATreeToItsAcceptedPath) {
  auto m = Model::random(tiny_config(50, 2), 10);
  const std::vector<int32_t> prefix = {1, 5, 6, 7};
  DraftTree tree;
  tree.tokens = {11, 12, 13, 14, 15};
  tree.parents = {-1, -1, 1, 1, 3};  // accepted path: 1 -> 3 -> 4
  KVCache cache = m->new_cache();
  run(*m, cache, prefix);
  ForwardRequest r;
  r.tokens = tree.tokens;
  for (int d : tree.depths()) r.positions.push_back(4 + d - 1);
  r.mask = tree_attention_mask(tree.parents, 4);
  m->forward(r, cache);
  cache.keep(4, {1, 3, 4});
  EXPECT_EQ(cache.size(), 7);
  const Rows next = run(*m, cache, {20});
  const Rows ref = full_logits(*m, {1, 5, 6, 7, 12, 14, 15, 20});
  EXPECT_TRUE(all_close(next, ref.slice(7, 1), 0.0, kTol));
}

TEST(KVCache, PreallocatedAndBoundsChecked) {
  const ModelConfig c = tiny_config();
  KVCache cache(c, 10);
  EXPECT_EQ(cache.bytes(), 2u * c.num_hidden_layers * c.num_key_value_heads * 10 * c.head_dim * 4);
  EXPECT_THROW(KVCache(c, 0), Error);
  EXPECT_THROW(KVCache(c, 65), Error);
  EXPECT_EQ(KVCache(c, 10, KVType::F16).bytes(), cache.bytes() / 2);
  EXPECT_THROW(cache.truncate(1), Error);
  EXPECT_THROW(cache.keep(0, {0}), Error);
  auto m = Model::random(c, 1);
  KVCache k = m->new_cache(10);
  run(*m, k, {1, 2, 3});
  EXPECT_THROW(k.keep(0, {2, 1}), Error);
  EXPECT_THROW(k.fork(4), Error);
  const void* storage = k.keys(0);
  for (int i = 0; i < 7; ++i) run(*m, k, {4});
  EXPECT_EQ(k.keys(0), storage) << "appending must not reallocate";
  EXPECT_THROW(run(*m, k, {4}), Error);
  EXPECT_EQ(k.size(), 10);
}

// reserve() grows a cache between forwards, keeping its entries: the
// logits that follow are bitwise those of a cache allocated large at once.
TEST(KVCache, ReserveGrowsKeepingTheEntriesBitwise) {
  ModelConfig c = tiny_config();
  auto m = Model::random(c, 4);
  for (KVType type : {KVType::F32, KVType::F16}) {
    m->set_kv_type(type);
    KVCache small = m->new_cache(4), large = m->new_cache();
    const std::vector<int32_t> first = {1, 2, 3}, then = {4, 5, 6, 7, 8};
    run(*m, small, first);
    run(*m, large, first);
    EXPECT_THROW(run(*m, small, then), Error) << "past its capacity";
    EXPECT_EQ(small.size(), 3) << "a refused forward changes nothing";
    small.reserve(2);  // never shrinks
    EXPECT_EQ(small.capacity(), 4);
    small.reserve(9);
    EXPECT_EQ(small.capacity(), 9);
    EXPECT_EQ(small.bytes(), KVCache::bytes_per_position(c, type) * 9);
    EXPECT_TRUE(same_values(run(*m, small, then), run(*m, large, then)));
    EXPECT_THROW(small.reserve(c.max_position_embeddings + 1), Error);
    EXPECT_EQ(small.size(), 8);
  }
}

TEST(KVCache, TypeNamesAndMismatchedForks) {
  EXPECT_EQ(parse_kv_type("F16"), KVType::F16);
  EXPECT_EQ(parse_kv_type("f32"), KVType::F32);
  EXPECT_STREQ(kv_type_name(KVType::F16), "f16");
  try {
    parse_kv_type("q8_0");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32 or f16"), std::string::npos) << e.what();
  }
  auto m = Model::random(tiny_config(50, 2), 3);
  KVCache wide = m->new_cache(16);
  run(*m, wide, {1, 2, 3});
  m->set_kv_type(KVType::F16);
  KVCache half = m->new_cache(16);
  EXPECT_EQ(half.type(), KVType::F16);
  EXPECT_THROW(half.copy_prefix_from(wide, 2), Error);
  run(*m, half, {1, 2, 3});
  EXPECT_EQ(half.fork(2).type(), KVType::F16);
}

// Every cache operation keeps an F16 cache's entries too: rollback, tree
// compaction and forks reach the logits a fresh F16 cache computes.
TEST(KVCache, HalfCacheRollbackForkAndCompactionMatchAFreshOne) {
  auto m = Model::random(tiny_config(50, 3), 5);
  m->set_kv_type(KVType::F16);
  const std::vector<int32_t> toks = {1, 7, 22, 3, 41, 9, 12, 30};
  const Rows fresh = full_logits(*m, toks);
  KVCache c = m->new_cache(32);
  run(*m, c, {toks[0], toks[1], toks[2], toks[3]});
  run(*m, c, {5, 6});
  c.truncate(4);
  KVCache f = c.fork(4);
  const Rows rest = run(*m, f, {toks[4], toks[5], toks[6], toks[7]});
  EXPECT_TRUE(same_values(rest, fresh.slice(4, 4))) << "rollback then fork";
  // A tree of two branches, 8 -> 9 and toks[4] -> toks[5]; keep the second.
  ForwardRequest tree;
  tree.tokens = {8, toks[4], 9, toks[5]};
  tree.positions = {4, 4, 5, 5};
  tree.mask = tree_attention_mask({-1, -1, 0, 1}, 4);
  m->forward(tree, c);
  c.keep(4, {1, 3});
  EXPECT_TRUE(same_values(run(*m, c, {toks[6], toks[7]}), fresh.slice(6, 2))) << "compaction";
}

}  // namespace splitspec::test

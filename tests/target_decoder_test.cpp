// The target's side of a generation: rounds commit exactly what the target
// would, the cache keeps the accepted path only, stop rules and room hold,
// and the extras (top-K, final hidden state) are read at the right rows.
#include "common/decoding/target_decoder.h"

#include <gtest/gtest.h>

#include "common/backend/cpu_backend.h"
#include "common/util/error.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

// The target's logits and final hidden state after each of `seq`'s tokens,
// from one plain forward.
ForwardResult full_forward(const Model& m, const std::vector<int32_t>& seq) {
  KVCache cache = m.new_cache();
  ForwardRequest f;
  f.tokens = seq;
  f.final_hidden = true;
  return m.forward(f, cache);
}

}  // namespace

TEST(TargetDecoder, TreeRoundsCommitTheTargetsTokensAndAnEmptyTreeIsOneStep) {
  auto m = Model::random(tiny_config(30, 2), 7);
  const CpuBackend cpu(*m);
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.ignore_eos = true;
  const std::vector<int32_t> prompt = {1, 4, 9};
  const Reference want = target_alone(*m, prompt, o);
  TargetDecoder dec(cpu, prompt, o);
  // Round 1: the right token under a wrong sibling, then a wrong child.
  DraftTree t;
  t.tokens = {(want.output_ids[0] + 1) % 30, want.output_ids[0], (want.output_ids[1] + 1) % 30};
  t.parents = {-1, -1, 1};
  const RoundResult r1 = dec.verify(t);
  EXPECT_EQ(r1.verdict.path, std::vector<int32_t>{1});
  EXPECT_EQ(r1.verdict.tokens, (std::vector<int32_t>{want.output_ids[0], want.output_ids[1]}));
  EXPECT_EQ(dec.generated(), 2);
  // The cache holds the accepted path only: plain steps continue exactly.
  while (!dec.finished()) dec.step();
  EXPECT_EQ(std::vector<int32_t>(dec.sequence().begin() + 3, dec.sequence().end()), want.output_ids);
  EXPECT_EQ(dec.finish(), FinishReason::kLength);
  EXPECT_NE(error_of([&] { dec.step(); }).find("has finished"), std::string::npos);
}

TEST(TargetDecoder, ExtrasAreTheTargetsTopKAndHiddenStateWhereEachTokenWasMade) {
  auto m = Model::random(tiny_config(30, 2), 8);
  const CpuBackend cpu(*m);
  GenerateOptions o;
  o.max_new_tokens = 20;
  o.ignore_eos = true;
  const std::vector<int32_t> prompt = {1, 4, 9};
  const Reference want = target_alone(*m, prompt, o);
  TargetDecoder dec(cpu, prompt, o);
  TargetDecoder::RoundRequest req;
  req.extras.top_k = 4;
  req.extras.hidden = true;
  // Two right nodes then a wrong one: three tokens come out.
  const RoundResult r =
      dec.verify(DraftTree::chain({want.output_ids[0], want.output_ids[1], (want.output_ids[2] + 1) % 30}), req);
  ASSERT_EQ(r.verdict.tokens.size(), 3u);
  ASSERT_EQ(r.extras.top_k.size(), 3u);
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), want.output_ids.begin(), want.output_ids.begin() + 2);
  const ForwardResult full = full_forward(*m, seq);
  for (size_t i = 0; i < 3; ++i) {
    const TopK& k = r.extras.top_k[i];
    ASSERT_EQ(k.ids.size(), 4u);
    EXPECT_EQ(k.ids[0], r.verdict.tokens[i]) << "greedy: the token made there is the top one";
    const std::vector<double> p =
        reference_softmax(full.logits.row(static_cast<int64_t>(prompt.size() - 1 + i)), full.logits.cols());
    for (size_t j = 0; j < 4; ++j) {
      EXPECT_NEAR(k.probs[j], p[k.ids[j]], 1e-5);
      if (j > 0) {
        EXPECT_LE(k.probs[j], k.probs[j - 1]);
      }
    }
  }
  // The hidden state that produced the last token: after the last accepted node.
  ASSERT_EQ(r.extras.hidden.size(), 32u);
  const float* h = full.final_hidden.row(static_cast<int64_t>(seq.size()) - 1);
  for (int64_t j = 0; j < 32; ++j) EXPECT_NEAR(r.extras.hidden[j], h[j], 1e-4);
  // Nothing asked, nothing sent.
  const RoundResult plain = dec.step();
  EXPECT_TRUE(plain.extras.top_k.empty());
  EXPECT_TRUE(plain.extras.hidden.empty());
}

TEST(TargetDecoder, RoomShrinksToTheContextsEndAndTheTapSeesEveryAskedLayer) {
  auto m = Model::random(tiny_config(30, 3), 9);  // context 64
  const CpuBackend cpu(*m);
  GenerateOptions o;
  o.max_new_tokens = 100;
  o.ignore_eos = true;
  TargetDecoder dec(cpu, std::vector<int32_t>(60, 3), o);
  EXPECT_EQ(dec.room(), 4);
  EXPECT_NE(error_of([&] { dec.verify(DraftTree::chain({1, 2, 3, 4, 5})); }).find("does not fit the context"),
            std::string::npos);
  TargetDecoder::RoundRequest req;
  req.tap_layers = {1, 2};
  std::vector<int64_t> tapped;
  req.tap = [&](int64_t after, RowsView rows, const Rng&) {
    tapped.push_back(after);
    EXPECT_EQ(rows.rows, 3) << "the rows verification reads: root and two nodes";
  };
  dec.verify(DraftTree::chain({1, 2}), req);
  EXPECT_EQ(tapped, (std::vector<int64_t>{1, 2}));
  while (!dec.finished()) dec.step();
  EXPECT_EQ(dec.finish(), FinishReason::kContext);
  EXPECT_EQ(dec.sequence().size(), 64u);
}

// A decoder's KV cache starts at its prompt and a little more and grows as
// the generation does, never past what reserved_bytes() promised; the
// tokens are those of a plain greedy loop over a cache of the whole context.
TEST(TargetDecoder, TheCacheGrowsWithTheGenerationWithinItsReservation) {
  ModelConfig c = tiny_config(30, 2);
  c.max_position_embeddings = 1024;
  auto m = Model::random(c, 10);
  const CpuBackend cpu(*m);
  GenerateOptions o;
  o.max_new_tokens = 300;
  o.ignore_eos = true;
  const std::vector<int32_t> prompt = {1, 4, 9};
  const size_t per_position = KVCache::bytes_per_position(c, KVType::F32);
  TargetDecoder dec(cpu, prompt, o, /*max_tree=*/4);
  EXPECT_EQ(dec.reserved_bytes(), (3 + 300 + 4) * per_position);
  const size_t first = dec.cache_bytes();
  EXPECT_LT(first, dec.reserved_bytes() / 2);
  EXPECT_EQ(dec.room(), 3 + 300 + 4 - 3);
  size_t most = first;
  int32_t round = 0;
  while (!dec.finished()) {
    // Drafts of up to four tokens, some right, most wrong.
    const int32_t n = std::min<int32_t>(1 + round++ % 4, dec.room());
    std::vector<int32_t> draft;
    for (int32_t i = 0; i < n; ++i) draft.push_back((round * 7 + i) % 30);
    dec.verify(DraftTree::chain(draft));
    most = std::max(most, dec.cache_bytes());
    EXPECT_LE(dec.cache_bytes(), dec.reserved_bytes());
  }
  EXPECT_GT(most, first);
  EXPECT_EQ(dec.generated(), 300);

  KVCache cache = m->new_cache();
  std::vector<int32_t> seq = prompt;
  ForwardRequest r;
  r.tokens = prompt;
  while (static_cast<int64_t>(seq.size()) < 303) {
    const Rows logits = m->forward(r, cache).logits;
    const int32_t next = splitspec::greedy_token(logits.row(logits.rows() - 1), c.vocab_size);
    seq.push_back(next);
    r.tokens = {next};
  }
  EXPECT_EQ(dec.sequence(), seq);
}

}  // namespace splitspec::test

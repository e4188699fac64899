// The wire form of a round (proto/round_codec.h): what the client encodes
// the server decodes to the same tree, and the other way for verdicts;
// every malformed field is refused with its reason.
#include "proto/round_codec.h"

#include <gtest/gtest.h>

#include "common/util/error.h"
#include "tests/test_util.h"

namespace splitspec {
namespace {

TEST(RoundCodec, ADraftDecodesToTheTreeItEncodes) {
  const int64_t vocab = 40;
  DraftTree tree;
  tree.tokens = {3, 7, 9, 11};
  tree.parents = {-1, -1, 0, 2};
  Distribution sparse(vocab, 0.0f), dense(vocab, 1.0f / vocab), other(vocab, 0.0f);
  sparse[3] = 0.75f;
  sparse[5] = 0.25f;
  other[11] = 0.5f;
  other[3] = 0.5f;
  tree.q = {sparse, dense, {}, other};
  for (const bool sampled : {false, true}) {
    v1::Draft wire;
    encode_draft(tree, sampled, wire);
    EXPECT_EQ(wire.q_size(), sampled ? 4 : 0);
    if (sampled) {
      EXPECT_TRUE(wire.q(1).dense().size() > 0) << "the wide q goes dense";
      EXPECT_EQ(wire.q(0).ids_size(), 2) << "the narrow one sparse";
      EXPECT_EQ(wire.q(2).ids_size(), 1) << "a deterministic node one-hot";
    }
    const DraftTree back = decode_draft(wire, vocab, !sampled);
    EXPECT_EQ(back.tokens, tree.tokens);
    EXPECT_EQ(back.parents, tree.parents);
    if (sampled) {
      ASSERT_EQ(back.q.size(), 4u);
      EXPECT_EQ(back.q[0], tree.q[0]);
      EXPECT_EQ(back.q[1], tree.q[1]);
      EXPECT_TRUE(back.q[2].empty());
      EXPECT_EQ(back.q[3], tree.q[3]);
    }
  }
  // A chain sends no parents.
  v1::Draft chain;
  encode_draft(DraftTree::chain({1, 2, 3}), false, chain);
  EXPECT_EQ(chain.parents_size(), 0);
  EXPECT_EQ(decode_draft(chain, vocab, true).parents, (std::vector<int32_t>{-1, 0, 1}));
}

TEST(RoundCodec, AMalformedDraftIsRefusedWithItsReason) {
  auto refused = [](const v1::Draft& d, bool greedy) {
    return test::error_of([&] { decode_draft(d, 40, greedy); });
  };
  v1::Draft d;
  d.add_tokens(3);
  d.add_tokens(4);
  d.add_parents(-1);
  EXPECT_NE(refused(d, true).find("1 parents for 2 tokens"), std::string::npos);
  d.clear_parents();
  EXPECT_NE(refused(d, false).find("sampling needs the q of every draft token"), std::string::npos);
  d.set_tokens(1, 99);
  EXPECT_NE(refused(d, true).find("outside the vocabulary"), std::string::npos);
  d.set_tokens(1, 4);
  for (int i = 0; i < 2; ++i) {
    v1::TokenDistribution* q = d.add_q();
    q->add_ids(i == 0 ? 3 : 4);
    q->add_probs(0.5f);
  }
  EXPECT_NE(refused(d, false).find("sums to"), std::string::npos);
}

TEST(RoundCodec, AVerdictRoundTripsAndAMalformedOneIsNamed) {
  DraftTree tree;
  tree.tokens = {3, 7, 9};
  tree.parents = {-1, -1, 1};
  Verdict v;
  v.accepted = 2;
  v.tokens = {7, 9, 12};
  v.path = {1, 2};
  v1::RoundVerdict wire;
  encode_verdict(v, wire);
  Verdict back;
  EXPECT_EQ(decode_verdict(wire, tree, 40, back), "");
  EXPECT_EQ(back.tokens, v.tokens);
  EXPECT_EQ(back.path, v.path);
  wire.set_path(0, 0);
  EXPECT_NE(decode_verdict(wire, tree, 40, back).find("not a branch"), std::string::npos);
  wire.set_path(0, 1);
  wire.set_tokens(2, 40);
  EXPECT_NE(decode_verdict(wire, tree, 40, back).find("outside the vocabulary"), std::string::npos);
  wire.set_tokens(2, 12);
  wire.set_accepted(3);
  EXPECT_NE(decode_verdict(wire, tree, 40, back).find("3 tokens for 3 accepted"), std::string::npos);
  wire.add_tokens(1);
  EXPECT_NE(decode_verdict(wire, tree, 40, back).find("accepts 3 of a 3-node tree of depth 2"), std::string::npos);

  // Top K and a hidden state.
  v1::RoundVerdict extras;
  encode_top_k({TopK{{5, 6}, {0.5f, 0.25f}}}, extras);
  encode_hidden({1.0f, -2.5f, 0.125f}, extras);
  std::vector<TopK> top_k;
  std::vector<float> hidden;
  EXPECT_EQ(decode_top_k(extras, 40, top_k), "");
  EXPECT_EQ(top_k[0].ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(decode_hidden(extras.hidden_state(), 3, hidden), "");
  EXPECT_EQ(hidden, (std::vector<float>{1.0f, -2.5f, 0.125f}));  // exact in half
  EXPECT_NE(decode_hidden(extras.hidden_state(), 4, hidden), "");
  extras.mutable_top_k(0)->set_probs(0, 1.5f);
  EXPECT_NE(decode_top_k(extras, 40, top_k), "");
}

}  // namespace
}  // namespace splitspec

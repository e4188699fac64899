// ReDrafter's recurrent head: the head file, beam search and its packing into
// a tree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/drafting/beam_search.h"
#include "common/drafting/recurrent_head.h"
#include "common/util/error.h"
#include "tests/test_util.h"

namespace splitspec::test {
namespace {

TEST(BeamsToTree, SharedPrefixesBecomeOneNodeBestBeamFirst) {
  const DraftTree t = beams_to_tree({{5, 6, 7}, {5, 6, 8}, {5, 9, 7}, {4, 6, 7}});
  EXPECT_EQ(t.tokens, (std::vector<int32_t>{5, 6, 7, 8, 9, 7, 4, 6, 7}));
  EXPECT_EQ(t.parents, (std::vector<int32_t>{-1, 0, 1, 1, 0, 4, -1, 6, 7}));
  EXPECT_TRUE(t.q.empty()) << "beams are chosen, so verified as one-hot";
  t.validate(10, false);
  DraftTree cut = t;
  cut.truncate(3);
  EXPECT_EQ(cut.tokens, (std::vector<int32_t>{5, 6, 7})) << "a cut tree keeps the best beam";
  EXPECT_EQ(beams_to_tree({{1, 2}, {1, 2}}).size(), 2) << "identical beams are one path";
}

TEST(BeamSearch, WidthOneIsTheHeadsGreedyChainAndBeamsAreRanked) {
  const RecurrentHead head = RecurrentHead::random(small_recurrent_head(12, 30), 3);
  std::vector<float> h(12);
  for (size_t i = 0; i < h.size(); ++i) h[i] = std::sin(static_cast<float>(i));
  const Beams one = beam_search(head, h.data(), 4, 1, 5);
  ASSERT_EQ(one.tokens.size(), 1u);
  // The greedy chain, step by step.
  std::vector<float> state(16), logits(30);
  RecurrentHead::Scratch scratch;
  int32_t token = 4;
  for (int d = 0; d < 5; ++d) {
    head.advance(state.data(), &token, 1, d == 0, scratch);
    head.logits(h.data(), state.data(), 1, logits.data(), scratch);
    token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(one.tokens[0][d], token) << "depth " << d;
  }
  const Beams four = beam_search(head, h.data(), 4, 4, 3);
  ASSERT_EQ(four.tokens.size(), 4u);
  for (size_t j = 0; j < 4; ++j) {
    EXPECT_EQ(four.tokens[j].size(), 3u);
    if (j > 0) {
      EXPECT_GE(four.log_probs[j - 1], four.log_probs[j]);
    }
    for (size_t k = 0; k < j; ++k) EXPECT_NE(four.tokens[j], four.tokens[k]);
  }
  EXPECT_LE(beams_to_tree(four.tokens).size(), 12);
  EXPECT_THROW(beam_search(head, h.data(), 4, 0, 3), Error);
}

TEST(RecurrentHead, SavesLoadsAndRefusesAnotherTargetsHead) {
  TempDir dir;
  RecurrentHeadConfig c = small_recurrent_head(12, 30);
  c.tokenizer_fingerprint = "00000000000000aa";
  const RecurrentHead head = RecurrentHead::random(c, 5);
  head.save(dir.str(), "{\"steps\": 3}");
  const RecurrentHead back = RecurrentHead::load(dir.str());
  EXPECT_EQ(back.weight_bytes(), head.weight_bytes());
  std::vector<float> h(12, 0.5f), s1(16), s2(16), l1(30), l2(30);
  const int32_t t = 7;
  RecurrentHead::Scratch scratch;
  head.advance(s1.data(), &t, 1, true, scratch);
  back.advance(s2.data(), &t, 1, true, scratch);
  head.logits(h.data(), s1.data(), 1, l1.data(), scratch);
  back.logits(h.data(), s2.data(), 1, l2.data(), scratch);
  EXPECT_EQ(l1, l2) << "weights are stored as they are held: half";
  back.check_target(12, 30, "00000000000000aa");
  back.check_target(12, 30, "");
  EXPECT_NE(error_of([&] { back.check_target(16, 30, ""); }).find("hidden size 12"), std::string::npos);
  EXPECT_NE(error_of([&] { back.check_target(12, 31, ""); }).find("vocabulary of 30"), std::string::npos);
  EXPECT_NE(error_of([&] { back.check_target(12, 30, "00000000000000bb"); }).find("tokenizer 00000000000000aa"),
            std::string::npos);
  EXPECT_NE(error_of([&] { back.advance(s1.data(), std::vector<int32_t>{30}.data(), 1, false, scratch); }).find("outside"),
            std::string::npos);

  // Malformed files: clear errors, never a crash.
  const std::filesystem::path json = dir.path() / "recurrent_drafter.json";
  const std::string good = read_file(json);
  EXPECT_NE(error_of([&] { RecurrentHead::load(dir.str("nowhere")); }).find("no recurrent draft head"), std::string::npos);
  write_file(json, "{\"format\": ");
  EXPECT_NE(error_of([&] { RecurrentHead::load(dir.str()); }).find("recurrent_drafter.json"), std::string::npos);
  write_file(json, "{\"format\": \"splitspec-recurrent-drafter\", \"hidden_size\": 12, \"vocab_size\": 30, "
                   "\"embed_dim\": 16, \"exit_dim\": 24, \"num_blocks\": 2, \"rank\": -1}");
  EXPECT_NE(error_of([&] { RecurrentHead::load(dir.str()); }).find("rank -1"), std::string::npos);
  write_file(json, "{\"format\": \"splitspec-recurrent-drafter\", \"hidden_size\": 12, \"vocab_size\": 30, "
                   "\"embed_dim\": 16, \"exit_dim\": 24, \"num_blocks\": 3, \"rank\": 8}");
  EXPECT_NE(error_of([&] { RecurrentHead::load(dir.str()); }).find("'blocks.2.w' is missing"), std::string::npos);
  write_file(json, good);
  const float nan = std::nanf("");
  std::vector<std::vector<float>> params;
  for (const HeadParam& p : recurrent_head_params(c)) {
    params.emplace_back(static_cast<size_t>(p.numel()), p.name == "in.b" ? nan : 0.1f);
  }
  RecurrentHead::from_floats(c, params).save(dir.str());
  EXPECT_NE(error_of([&] { RecurrentHead::load(dir.str()); }).find("not finite"), std::string::npos);
}

}  // namespace
}  // namespace splitspec::test

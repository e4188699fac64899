// The `model` drafter: chains from a draft model, exact through the round
// loop with the local verifier (greedy token for token, sampled in
// distribution), forks that continue exactly as the original would, and
// counters that count what was verified.
#include "common/drafting/model_drafter.h"

#include <gtest/gtest.h>

#include "common/util/error.h"
#include "tests/test_util.h"

namespace splitspec::test {

TEST(ModelDrafter, GreedyEqualsTargetAloneForEveryGamma) {
  std::shared_ptr<const Model> target = Model::random(tiny_config(50, 2), 41);
  auto draft = noisy_copy(*target, 0.004, 1);
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.ignore_eos = true;
  std::mt19937 g(3);
  double total_accepted = 0, rounds = 0;
  for (int p = 0; p < 8; ++p) {
    std::vector<int32_t> prompt = {1};
    for (int i = 0; i < 1 + p; ++i) prompt.push_back(static_cast<int32_t>(g() % 50));
    const auto reference = target_alone(*target, prompt, o).output_ids;
    for (int gamma = 1; gamma <= 8; ++gamma) {
      ModelDrafter drafter(draft);
      const RoundLoopResult r = decode_locally(target, drafter, prompt, o, gamma);
      ASSERT_EQ(r.ids, reference) << "prompt " << p << " gamma " << gamma;
      EXPECT_EQ(drafter.stats().rounds, r.stats.rounds);
      for (auto a : drafter.stats().accepted_per_position) total_accepted += a;
      rounds += r.stats.rounds;
    }
  }
  EXPECT_GT(total_accepted / rounds, 0.3) << "the draft should be accepted sometimes";
}

TEST(ModelDrafter, StopsAtEosAndAtContextEnd) {
  std::shared_ptr<const Model> target = Model::random(tiny_config(50, 2), 42);
  auto draft = noisy_copy(*target, 0.02, 2);
  GenerateOptions o;
  o.max_new_tokens = 1000;
  o.ignore_eos = true;
  ModelDrafter d1(draft);
  const RoundLoopResult full = decode_locally(target, d1, {1, 2}, o, 4);
  EXPECT_EQ(full.ids.size(), 62u) << "context 64";
  EXPECT_EQ(full.finish, FinishReason::kContext);
  EXPECT_EQ(full.ids, target_alone(*target, {1, 2}, o).output_ids);
  o.ignore_eos = false;
  ModelConfig c = target->config();
  c.eos_token_id = full.ids[5];
  std::shared_ptr<const Model> eos_target = Model::random(c, 42);  // the same seed: the target's weights
  ModelDrafter d2(draft);
  const RoundLoopResult stopped = decode_locally(eos_target, d2, {1, 2}, o, 4);
  EXPECT_EQ(stopped.ids, target_alone(*eos_target, {1, 2}, o).output_ids);
  EXPECT_EQ(stopped.finish, FinishReason::kEos);
}

TEST(ModelDrafter, SampledFirstTokensFollowTheTarget) {
  // Chi-square test (alpha 1e-4) of the first two generated tokens against
  // the target's own distribution, over many seeds.
  std::shared_ptr<const Model> target = Model::random(tiny_config(12, 1), 43);
  auto draft = noisy_copy(*target, 0.5, 3);
  GenerateOptions o;
  o.max_new_tokens = 2;
  o.ignore_eos = true;
  o.sampling.temperature = 1.0f;
  const std::vector<int32_t> prompt = {1, 5, 7};
  const TwoTokenMarginals want = two_token_marginals(*target, prompt, o.sampling);
  std::vector<int64_t> first(12, 0), second(12, 0);
  ModelDrafter drafter(draft);
  for (uint64_t seed = 0; seed < 6000; ++seed) {
    o.sampling.seed = seed;
    const auto out = decode_locally(target, drafter, prompt, o, 3).ids;
    first[out[0]]++;
    second[out[1]]++;
  }
  EXPECT_GT(goodness_of_fit_pvalue(first, want.first), 1e-4);
  EXPECT_GT(goodness_of_fit_pvalue(second, want.second), 1e-4);
}

// A fork continues exactly as the original: accept the same verdict, propose
// the same tokens; swap_state hands states over without touching counters.
TEST(ModelDrafter, ForksContinueAsTheOriginalAndSwapKeepsCounters) {
  std::shared_ptr<const Model> draft = Model::random(tiny_config(40, 2), 8);
  DraftParams params;
  params.gamma = 3;
  ModelDrafter main(draft);
  main.begin({1, 7, 9, 11}, params);
  const DraftTree round1 = main.propose(8);
  ASSERT_EQ(round1.size(), 3);
  std::unique_ptr<Drafter> fork = main.fork();
  ASSERT_TRUE(fork);
  Verdict v;
  v.accepted = 1;
  v.path = {0};
  v.tokens = {round1.tokens[0], 5};
  const VerdictExtras none;
  fork->accept(RoundOutcome{round1, v, none});
  const DraftTree forked = fork->propose(8);
  main.accept(RoundOutcome{round1, v, none});
  EXPECT_EQ(main.propose(8).tokens, forked.tokens);

  // assign_state re-syncs a used fork; swap_state moves states, not counters.
  ModelDrafter other(draft);
  other.begin({1, 2}, params);
  other.propose(2);
  other.assign_state(main);
  EXPECT_EQ(other.sequence(), main.sequence());
  const int64_t main_rounds = main.stats().rounds, other_rounds = other.stats().rounds;
  main.swap_state(other);
  EXPECT_EQ(main.stats().rounds, main_rounds);
  EXPECT_EQ(other.stats().rounds, other_rounds);
  EXPECT_GT(main.memory_bytes(), 0u);
}

// Counters count what was verified: a round cut below what was proposed
// (as a pre-draft near the context's end is) records only the sent depth.
TEST(ModelDrafter, CountersFollowTheTreeVerifiedNotTheOneProposed) {
  std::shared_ptr<const Model> draft = Model::random(tiny_config(40, 2), 8);
  DraftParams params;
  params.gamma = 4;
  ModelDrafter d(draft);
  d.begin({1, 2, 3}, params);
  DraftTree tree = d.propose(8);
  ASSERT_EQ(tree.size(), 4);
  tree.truncate(2);
  Verdict v;
  v.accepted = 2;
  v.path = {0, 1};
  v.tokens = {tree.tokens[0], tree.tokens[1], 7};
  d.accept(RoundOutcome{tree, v, VerdictExtras{}});
  EXPECT_EQ(d.stats().proposed_per_position, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(d.stats().accepted_per_position, (std::vector<int64_t>{1, 1}));
  Stats s;  // the acceptance Stats derives from the drafter's counts
  static_cast<DrafterCounts&>(s) = d.stats();
  s.derive();
  EXPECT_EQ(s.acceptance_per_position, (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(d.sequence(), (std::vector<int32_t>{1, 2, 3, tree.tokens[0], tree.tokens[1], 7}));
}

TEST(ModelDrafterBadInput, BadGammaAndPrompts) {
  std::shared_ptr<const Model> target = Model::random(tiny_config(50, 1), 1);
  GenerateOptions o;
  ModelDrafter d(target);
  EXPECT_NE(error_of([&] { decode_locally(target, d, {1}, o, 0); }).find("gamma must be at least 1"), std::string::npos);
  EXPECT_NE(error_of([&] { decode_locally(target, d, {}, o, 2); }).find("prompt is empty"), std::string::npos);
  EXPECT_NE(error_of([&] { decode_locally(target, d, {1, 70}, o, 2); }).find("outside the vocabulary"), std::string::npos);
}

}  // namespace splitspec::test

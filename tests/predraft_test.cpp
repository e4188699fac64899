// Pre-drafting on the client: the switch that decides when it pays, and the
// pre-drafter whose hit is exactly the draft drafting after the verdict gives.
#include <gtest/gtest.h>

#include <algorithm>

#include "client/predraft.h"
#include "client/predraft_switch.h"
#include "common/drafting/model_drafter.h"
#include "tests/test_util.h"

namespace splitspec {
namespace {

// The adaptive switch measures both arms in blocks, pre-drafting first, the
// first round of each block not counted; then it keeps to the faster per
// round and still tries the other a block at a time.
TEST(PredraftSwitch, MeasuresBothArmsInBlocksThenTakesTheFasterAndStillExplores) {
  PredraftSwitch sw(/*block=*/3, /*explore_every=*/4);
  auto run = [&](int rounds, double with_ms, double without_ms) {
    std::vector<bool> used;
    for (int i = 0; i < rounds; ++i) {
      const PredraftSwitch::Choice c = sw.next();
      used.push_back(c.use);
      sw.observe(c, c.use ? with_ms : without_ms, 3);
    }
    return used;
  };
  EXPECT_EQ(run(6, 6.0, 9.0), (std::vector<bool>{true, true, true, false, false, false}));
  EXPECT_EQ(sw.rounds_with(), 2) << "a block's first round is warm-up";
  EXPECT_EQ(sw.rounds_without(), 2);
  // Blocks 3..18: the faster arm, but every 4th block (4, 8, 12, 16) the other.
  std::vector<bool> used = run(48, 6.0, 9.0);
  EXPECT_EQ(std::count(used.begin(), used.end(), false), 12) << "one block in 4 tries the slower arm";
  EXPECT_FALSE(used[3]);  // block 4 explores
  EXPECT_TRUE(used[6]);
  // The regime changes: pre-drafting becomes the slower. The switch notices
  // through its exploring blocks and turns it off.
  run(600, 12.0, 9.0);
  used = run(48, 12.0, 9.0);
  EXPECT_EQ(std::count(used.begin(), used.end(), true), 12);
  // A round that committed nothing says nothing.
  const int64_t samples = sw.rounds_with() + sw.rounds_without();
  PredraftSwitch::Choice c = sw.next();
  c.sample = true;
  sw.observe(c, 100.0, 0);
  EXPECT_EQ(sw.rounds_with() + sw.rounds_without(), samples);
}

// A pre-drafted state is exactly the state drafting after the verdict would
// reach: the same tokens come out, and the main drafter continues from it.
TEST(PreDrafter, HitGivesTheDraftThatDraftingAfterTheVerdictGives) {
  std::shared_ptr<const Model> draft = Model::random(test::tiny_config(40, 2), 8);
  const std::vector<int32_t> prompt = {1, 7, 9, 11};
  DraftParams greedy;
  greedy.gamma = 3;
  ModelDrafter main(draft), reference(draft);
  main.begin(prompt, greedy);
  reference.begin(prompt, greedy);
  const DraftTree round1 = main.propose(8);
  reference.propose(8);
  // The verdict: first draft accepted, then a correction.
  auto verdict = [](std::vector<int32_t> tokens, int32_t accepted) {
    Verdict v;
    v.tokens = std::move(tokens);
    v.accepted = accepted;
    for (int32_t i = 0; i < accepted; ++i) v.path.push_back(i);
    return v;
  };
  const Verdict final_verdict = verdict({round1.tokens[0], 5}, 1);
  PreDrafter pre(2, QueuePolicy::kPriority, [](int64_t) { return 8; }, 1);
  pre.begin_round(1, main, round1, static_cast<int64_t>(prompt.size()));
  pre.push({1, verdict({round1.tokens[0], 6}, 1), 0.2, 3, {}});  // a wrong prediction
  pre.push({1, final_verdict, 0.9, 5, {}});
  pre.push({1, final_verdict, 0.8, 6, {}});                      // duplicate: drafted once
  // The workers are asynchronous: the final verdict waits for a running match.
  ASSERT_TRUE(test::wait_until([&] { return pre.stats().predrafts >= 2; }, std::chrono::seconds(10)));
  const VerdictExtras none;
  const std::optional<DraftTree> got = pre.take(RoundOutcome{round1, final_verdict, none}, main);
  ASSERT_TRUE(got.has_value());
  reference.accept(RoundOutcome{round1, final_verdict, none});
  const DraftTree want = reference.propose(8);
  EXPECT_EQ(got->tokens, want.tokens);
  EXPECT_EQ(main.sequence(), reference.sequence());
  EXPECT_EQ(main.stats().rounds, 1) << "the main drafter counts the round it took over";
  // Both continue identically from here.
  const Verdict round2 = verdict({want.tokens[0], want.tokens[1], 3}, 2);
  main.accept(RoundOutcome{*got, round2, none});
  reference.accept(RoundOutcome{want, round2, none});
  const DraftTree round3 = main.propose(8);
  EXPECT_EQ(round3.tokens, reference.propose(8).tokens);
  EXPECT_EQ(pre.stats().predraft_hits, 1);
  EXPECT_EQ(pre.stats().exit_layer_sum, 5);

  // A verdict nobody predicted is a miss and leaves main untouched.
  pre.begin_round(3, main, round3, static_cast<int64_t>(main.sequence().size()));
  const auto before = main.sequence();
  EXPECT_FALSE(pre.take(RoundOutcome{round3, verdict({4}, 0), none}, main).has_value());
  EXPECT_EQ(main.sequence(), before);
  EXPECT_EQ(pre.stats().predraft_lookups, 2);
}

}  // namespace
}  // namespace splitspec

// How the draft heads' trees grow (head_chain.h): a level keeps the W most
// probable paths, so a tree branches at whatever depth its head is least
// sure, and every level's forward reads its nodes' parents' outputs under
// the tree's mask. The head is scripted: logits by the token a row feeds.
#include "common/drafting/head_chain.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace splitspec::test {
namespace {

constexpr int64_t kVocab = 8, kHidden = 2;

// A row of logits with these probabilities (the rest near zero).
void fill(float* row, const std::map<int32_t, double>& p) {
  for (int64_t t = 0; t < kVocab; ++t) row[t] = -30.0f;
  for (const auto& [t, q] : p) row[t] = static_cast<float>(std::log(q));
}

HeadStep first_step(const std::map<int32_t, double>& p) {
  HeadStep s{Rows(1, kVocab), Rows(1, kHidden)};
  fill(s.logits.row(0), p);
  s.hidden.row(0)[0] = -1.0f;  // the root's output
  s.hidden.row(0)[1] = 0.0f;
  return s;
}

// Logits after each token; each row's output names the token it read, so a
// level can check that its rows' hidden inputs are their parents' outputs.
HeadLevel scripted(const std::map<int32_t, std::map<int32_t, double>>& next, std::vector<std::vector<int32_t>>& seen,
                   std::vector<std::vector<float>>& inputs) {
  return [&next, &seen, &inputs](const std::vector<int32_t>& tokens, const Rows& hidden, std::vector<int64_t> positions,
                                 AttentionMask mask) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    EXPECT_EQ(hidden.rows(), n);
    EXPECT_EQ(static_cast<int64_t>(positions.size()), n);
    EXPECT_EQ(mask.rows, n);
    seen.push_back(tokens);
    std::vector<float> in;
    for (int64_t i = 0; i < n; ++i) in.push_back(hidden.row(i)[0]);
    inputs.push_back(in);
    HeadStep s{Rows(n, kVocab), Rows(n, kHidden)};
    for (int64_t i = 0; i < n; ++i) {
      fill(s.logits.row(i), next.at(tokens[static_cast<size_t>(i)]));
      s.hidden.row(i)[0] = static_cast<float>(tokens[static_cast<size_t>(i)]);
      s.hidden.row(i)[1] = 0.0f;
    }
    return s;
  };
}

}  // namespace

TEST(HeadTree, EachLevelKeepsTheMostProbablePathsSoItBranchesWhereTheHeadIsUnsure) {
  // Token 1 (0.9) then 3 or 4 (0.5 each): 0.45 a path; token 2 (0.1) then
  // 5 (1.0): 0.1. Two nodes a level keep 1-3 and 1-4, branching at depth 2,
  // not the first draft's runner-up continued greedily.
  std::vector<std::vector<int32_t>> seen;
  std::vector<std::vector<float>> inputs;
  const std::map<int32_t, std::map<int32_t, double>> next = {
      {1, {{3, 0.5}, {4, 0.5}}}, {2, {{5, 0.999}}}, {3, {{6, 0.999}}}, {4, {{7, 0.6}, {6, 0.4}}}};
  int64_t forwards = 0;
  const DraftTree t = tree_from_head(first_step({{1, 0.9}, {2, 0.1}}), 2, 16, 3, 10, scripted(next, seen, inputs),
                                     nullptr, forwards);
  EXPECT_EQ(t.tokens, (std::vector<int32_t>{1, 2, 3, 4, 6, 7}));
  EXPECT_EQ(t.parents, (std::vector<int32_t>{-1, -1, 0, 0, 2, 3}));
  EXPECT_EQ(forwards, 2);
  // Level 1 fed both first-level nodes the root's output; level 2 fed 3 and
  // 4 the output of their parent, token 1's row.
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(inputs[0], (std::vector<float>{-1.0f, -1.0f}));
  EXPECT_EQ(seen[1], (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(inputs[1], (std::vector<float>{1.0f, 1.0f}));
}

TEST(HeadTree, WidthOneIsTheGreedyChainAndTheBudgetStopsIt) {
  std::vector<std::vector<int32_t>> seen;
  std::vector<std::vector<float>> inputs;
  const std::map<int32_t, std::map<int32_t, double>> next = {{1, {{3, 0.6}, {4, 0.4}}}, {3, {{6, 0.9}}}, {6, {{2, 0.9}}}};
  int64_t forwards = 0;
  DraftTree t = tree_from_head(first_step({{1, 0.9}}), 1, 16, 4, 0, scripted(next, seen, inputs), nullptr, forwards);
  EXPECT_EQ(t.tokens, (std::vector<int32_t>{1, 3, 6, 2}));
  EXPECT_TRUE(t.is_chain());
  // Three nodes at most: the level that would pass the budget is not run.
  seen.clear();
  inputs.clear();
  const std::map<int32_t, std::map<int32_t, double>> two = {{1, {{3, 1.0}}}, {2, {{5, 1.0}}}};
  t = tree_from_head(first_step({{1, 0.9}, {2, 0.1}}), 2, 3, 4, 0, scripted(two, seen, inputs), nullptr, forwards);
  EXPECT_LE(t.size(), 3);
}

TEST(HeadTree, TokensOutsideAShortlistAreNeverNodes) {
  // A shortlisted head's -inf tokens: a level with fewer live tokens than
  // its width keeps only those.
  std::vector<std::vector<int32_t>> seen;
  std::vector<std::vector<float>> inputs;
  const std::map<int32_t, std::map<int32_t, double>> next = {{1, {{3, 1.0}}}};
  HeadStep first = first_step({{1, 1.0}});
  for (int64_t t = 0; t < kVocab; ++t)
    if (t != 1) first.logits.row(0)[t] = -std::numeric_limits<float>::infinity();
  int64_t forwards = 0;
  const DraftTree t = tree_from_head(first, 3, 16, 2, 0, scripted(next, seen, inputs), nullptr, forwards);
  EXPECT_EQ(t.tokens.front(), 1);
  EXPECT_EQ(t.parents.front(), -1);
  EXPECT_EQ(std::count(t.parents.begin(), t.parents.end(), -1), 1);
}

}  // namespace splitspec::test

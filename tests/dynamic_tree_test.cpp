#include "common/drafting/dynamic_tree.h"

#include <gtest/gtest.h>

#include <map>

#include "common/util/error.h"

namespace splitspec::test {
namespace {

// Candidates by path (root: empty), as DIAA's tables would give them.
struct Script {
  std::map<std::vector<int32_t>, std::vector<LutCandidate>> next;
  std::vector<std::vector<int32_t>> expanded;  // paths, in order
  CandidateSource source() {
    return [this](const DraftTree& t, int32_t node, std::vector<LutCandidate>& out) {
      std::vector<int32_t> path;
      for (int32_t v = node; v >= 0; v = t.parents[v]) path.insert(path.begin(), t.tokens[v]);
      expanded.push_back(path);
      auto it = next.find(path);
      out = it == next.end() ? std::vector<LutCandidate>{} : it->second;
    };
  }
};

// DIAA's Fig. 7 setting (B = 6, delta = 0.8, alpha = 0.7, tau = 5e-3): t1,
// the best path, is expanded first and its t13 scores below tau and is
// pruned. Nodes then enter one at a time, best score first (dynamic_tree.h
// says why), so t2's likely child t21 enters before t1's unlikely t12, and
// t3 (0.0245) never does.
TEST(DynamicTree, PaperFigure7) {
  enum : int32_t { t1 = 1, t2, t3, t11, t12, t13, t111, t21 };
  Script s;
  s.next[{}] = {{t1, 0.6f}, {t2, 0.3f}, {t3, 0.05f}};
  s.next[{t1}] = {{t11, 0.7f}, {t12, 0.2f}, {t13, 0.02f}};
  s.next[{t1, t11}] = {{t111, 0.5f}};
  s.next[{t2}] = {{t21, 0.9f}};
  DynamicTreeOptions o;
  o.budget = 6;
  o.depth_decay = 0.8;
  o.width_decay = 0.7;
  o.threshold = 5e-3;
  const DynamicTree d = build_dynamic_tree(s.source(), o);
  EXPECT_EQ(d.tree.tokens, (std::vector<int32_t>{t1, t11, t2, t21, t111, t12}));
  EXPECT_EQ(d.tree.parents, (std::vector<int32_t>{-1, 0, -1, 2, 1, 0}));
  // Eq. 2: cumulative probability x delta^(depth-1) x alpha^(rank-1).
  const std::vector<double> want = {0.6, 0.42 * 0.8, 0.3 * 0.7, 0.27 * 0.8, 0.21 * 0.64, 0.12 * 0.8 * 0.7};
  ASSERT_EQ(d.scores.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(d.scores[i], want[i], 1e-6) << "node " << i;
  // t13 would score 0.012 x 0.8 x 0.49 = 0.0047 < tau: pruned, never a node.
  EXPECT_EQ(s.expanded, (std::vector<std::vector<int32_t>>{{}, {t1}, {t1, t11}, {t2}, {t2, t21}, {t1, t11, t111}}));
  EXPECT_TRUE(d.tree.q.empty()) << "chosen nodes carry no q: verified as one-hot";
}

TEST(DynamicTree, BudgetThresholdAndDepth) {
  Script s;
  s.next[{}] = {{5, 0.001f}, {6, 0.0005f}};
  DynamicTreeOptions o;
  o.budget = 8;
  // The first depth is always expanded: its top candidate enters below tau.
  DynamicTree d = build_dynamic_tree(s.source(), o);
  EXPECT_EQ(d.tree.tokens, (std::vector<int32_t>{5}));
  o.budget = 0;
  EXPECT_EQ(build_dynamic_tree(s.source(), o).tree.size(), 0);
  // A chain of sure tokens stops at max_depth.
  Script chain;
  chain.next[{}] = {{1, 1.0f}};
  chain.next[{1}] = {{1, 1.0f}};
  chain.next[{1, 1}] = {{1, 1.0f}};
  chain.next[{1, 1, 1}] = {{1, 1.0f}};
  o.budget = 10;
  o.max_depth = 3;
  d = build_dynamic_tree(chain.source(), o);
  EXPECT_EQ(d.tree.parents, (std::vector<int32_t>{-1, 0, 1}));
  o.depth_decay = 0;
  EXPECT_THROW(o.validate(), Error);
}

TEST(DynamicTree, StaticShapeTakesFixedWidthsBreadthFirst) {
  Script s;
  s.next[{}] = {{1, 0.5f}, {2, 0.3f}, {3, 0.1f}};
  s.next[{1}] = {{4, 0.9f}, {5, 0.05f}, {6, 0.01f}};
  s.next[{2}] = {{7, 0.001f}};
  DynamicTreeOptions o;
  o.static_shape = true;
  o.static_root_width = 2;
  o.static_width = 2;
  o.budget = 5;
  const DynamicTree d = build_dynamic_tree(s.source(), o);
  // No pruning: 7 enters though it scores below tau.
  EXPECT_EQ(d.tree.tokens, (std::vector<int32_t>{1, 2, 4, 5, 7}));
  EXPECT_EQ(d.tree.parents, (std::vector<int32_t>{-1, -1, 0, 0, 1}));
}

}  // namespace
}  // namespace splitspec::test

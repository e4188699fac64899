#pragma once
// DIAA's dynamic token tree (Eq. 1-2), grown from candidate lists (a token
// and its estimated probability, in rank order). A path's score is its
// cumulative probability times delta^(depth-1) (depth decay) times
// alpha^(rank-1) (width decay; rank of its last token among its siblings,
// from 1). Paths scoring below tau are pruned; the budget caps the nodes.
//
// Where this departs from the paper, and why:
// - A priority queue holds candidate paths, and the best one becomes a node
//   at each step (then queues its own candidates). The paper pops the best
//   node and adds all its successors at once; with K = 8 that makes wide,
//   shallow trees that ignore the decays (on the demo pair, 16 nodes: 2.50
//   tokens a verification, under a static tree's 2.83). One at a time is
//   the greedy that maximises Eq. 1's utility under a node budget.
// - The budget counts nodes: each is verified once (tree attention). The
//   paper counts the summed length of root-to-leaf paths.
// - The first depth is always expanded: the root's best candidate enters
//   whatever its score.
//
// Nodes are chosen, not sampled: the tree carries no q, and verification
// treats every node as one-hot at its token.
#include <cstdint>
#include <functional>
#include <vector>

#include "common/decoding/token_tree.h"
#include "common/drafting/lut_tables.h"

namespace splitspec {

struct DynamicTreeOptions {
  int32_t budget = 16;        // nodes at most (B)
  double depth_decay = 0.8;   // delta
  double width_decay = 0.5;   // alpha (DIAA's Fig. 7 uses 0.7; 0.5 measured better here)
  double threshold = 5e-3;    // tau
  int32_t max_depth = 16;     // no path longer
  // Static top-K tree instead: every node takes its best `static_width`
  // candidates, breadth first, until the budget is spent (no scores, no
  // pruning); the root takes `static_root_width`.
  bool static_shape = false;
  int32_t static_width = 2;
  int32_t static_root_width = 4;
  void validate() const;  // throws splitspec::Error
};

// Candidates after the path that ends at `node` (-1: the root), given the
// tree so far.
using CandidateSource = std::function<void(const DraftTree& tree, int32_t node, std::vector<LutCandidate>& out)>;

struct DynamicTree {
  DraftTree tree;
  std::vector<double> scores;  // per node, Eq. 2
  int32_t expansions = 0;      // candidate lists read
};

DynamicTree build_dynamic_tree(const CandidateSource& candidates, const DynamicTreeOptions& options);

}  // namespace splitspec

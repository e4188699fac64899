#pragma once
// A draft token tree hanging off the last committed token (the root). A chain
// is the tree whose node i has parent i-1.
#include <cstdint>
#include <vector>

#include "common/decoding/sampling.h"
#include "common/model/attention_mask.h"

namespace splitspec {

struct DraftTree {
  std::vector<int32_t> tokens;
  // parents[i] < i is node i's parent, or -1 for a child of the root.
  std::vector<int32_t> parents;
  // Sampling mode: q[i] is the distribution node i was drawn from, given its
  // parent and the siblings drawn before it; an empty q[i] marks a node chosen
  // deterministically, whose q is one-hot at its token. No q at all: every
  // node was chosen so (and greedy verification never reads q). Verification
  // is exact either way.
  std::vector<Distribution> q;

  static DraftTree chain(std::vector<int32_t> tokens, std::vector<Distribution> q = {});
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  bool is_chain() const;
  // Depth of the deepest node (0 for no tree): the most tokens it can add.
  int32_t max_depth() const;
  // Node i's q (null: chosen deterministically, one-hot at tokens[i]).
  const Distribution* q_of(int32_t i) const { return q.empty() || q[i].empty() ? nullptr : &q[i]; }
  // The first `n` nodes (a parent precedes its children, so they form a tree).
  void truncate(int32_t n);
  // Children of `node` (-1: the root) in index order, the order they are tried.
  std::vector<int32_t> children(int32_t node) const;
  // Distance from the root: 1 for the root's children.
  std::vector<int32_t> depths() const;
  // Throws splitspec::Error on a malformed tree, out-of-vocabulary tokens, or
  // (when `check_q`) q of the wrong count, or q that are not distributions
  // supporting their token.
  void validate(int64_t vocab_size, bool check_q) const;
};

// [n, past+n]: node i attends to the cached prefix, its ancestors and
// itself. For a chain this is the causal mask.
AttentionMask tree_attention_mask(const std::vector<int32_t>& parents, int64_t past);

}  // namespace splitspec

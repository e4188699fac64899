#include "common/decoding/token_tree.h"

#include <algorithm>
#include <cmath>

#include "common/util/error.h"

namespace splitspec {

DraftTree DraftTree::chain(std::vector<int32_t> tokens, std::vector<Distribution> q) {
  DraftTree t;
  t.parents.resize(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) t.parents[i] = static_cast<int32_t>(i) - 1;
  t.tokens = std::move(tokens);
  t.q = std::move(q);
  return t;
}

bool DraftTree::is_chain() const {
  for (int32_t i = 0; i < size(); ++i)
    if (parents[i] != i - 1) return false;
  return true;
}

int32_t DraftTree::max_depth() const {
  int32_t deepest = 0;
  for (int32_t d : depths()) deepest = std::max(deepest, d);
  return deepest;
}

void DraftTree::truncate(int32_t n) {
  if (n >= size()) return;
  tokens.resize(n);
  parents.resize(n);
  if (!q.empty()) q.resize(n);
}

std::vector<int32_t> DraftTree::children(int32_t node) const {
  std::vector<int32_t> out;
  for (int32_t i = node + 1; i < size(); ++i)
    if (parents[i] == node) out.push_back(i);
  return out;
}

std::vector<int32_t> DraftTree::depths() const {
  std::vector<int32_t> d(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) d[i] = parents[i] < 0 ? 1 : d[parents[i]] + 1;
  return d;
}

void DraftTree::validate(int64_t vocab_size, bool check_q) const {
  if (parents.size() != tokens.size())
    throw Error("draft tree: " + std::to_string(tokens.size()) + " tokens but " + std::to_string(parents.size()) + " parents");
  for (int32_t i = 0; i < size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size)
      throw Error("draft tree: token id " + std::to_string(tokens[i]) + " outside the vocabulary [0, " +
                  std::to_string(vocab_size) + ")");
    if (parents[i] < -1 || parents[i] >= i)
      throw Error("draft tree: node " + std::to_string(i) + " has parent " + std::to_string(parents[i]) +
                  "; a parent must precede its child");
  }
  if (!check_q || q.empty()) return;
  if (q.size() != tokens.size())
    throw Error("draft tree: " + std::to_string(q.size()) + " q for " + std::to_string(tokens.size()) +
                " draft tokens; give one per token (empty for a token chosen deterministically) or none");
  for (int32_t i = 0; i < size(); ++i) {
    if (q[i].empty()) continue;  // one-hot at its token
    if (static_cast<int64_t>(q[i].size()) != vocab_size)
      throw Error("draft tree: q of node " + std::to_string(i) + " has " + std::to_string(q[i].size()) +
                  " entries, vocabulary has " + std::to_string(vocab_size));
    double sum = 0.0;
    for (float v : q[i]) {
      if (!(v >= 0.0f) || !std::isfinite(v)) throw Error("draft tree: q of node " + std::to_string(i) + " has a negative or non-finite entry");
      sum += v;
    }
    if (std::abs(sum - 1.0) > 1e-3)
      throw Error("draft tree: q of node " + std::to_string(i) + " sums to " + std::to_string(sum) + ", not 1");
    if (q[i][tokens[i]] <= 0.0f)
      throw Error("draft tree: node " + std::to_string(i) + "'s token has probability 0 under its own q");
  }
}

AttentionMask tree_attention_mask(const std::vector<int32_t>& parents, int64_t past) {
  const int64_t n = static_cast<int64_t>(parents.size());
  AttentionMask mask(n, past + n);
  for (int64_t i = 0; i < n; ++i) std::fill(mask.row(i), mask.row(i) + past, 1);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t p = parents[i];
    if (p >= i || p < -1)
      throw Error("tree mask: node " + std::to_string(i) + " has parent " + std::to_string(p) + "; parents must come first");
    // A node sees what its parent sees, plus itself.
    if (p >= 0)
      for (int64_t j = 0; j <= p; ++j) mask.row(i)[past + j] = mask.row(p)[past + j];
    mask.row(i)[past + i] = 1;
  }
  return mask;
}

}  // namespace splitspec

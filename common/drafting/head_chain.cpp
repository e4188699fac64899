#include "common/drafting/head_chain.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

namespace splitspec {

DraftTree chain_from_head(const HeadStep& first, int32_t k, const SamplingParams& sampling, Rng& rng,
                          const std::function<HeadStep(int32_t token, const Rows& hidden)>& step,
                          const std::function<bool()>& stop, int64_t& forwards) {
  const int64_t vocab = first.logits.cols();
  std::vector<int32_t> tokens;
  std::vector<Distribution> qs;
  auto choose = [&](const float* logits) {
    if (sampling.greedy()) return tokens.push_back(greedy_token(logits, vocab));
    Sample s = sample(logits, vocab, sampling, rng);
    tokens.push_back(s.token);
    qs.push_back(std::move(s.q));
  };
  choose(first.logits.row(0));
  Rows hidden = first.hidden;
  for (int32_t i = 1; i < k; ++i) {
    if (stop && stop()) break;
    HeadStep next = step(tokens.back(), hidden);
    choose(next.logits.row(0));
    hidden = std::move(next.hidden);
    forwards += 1;
  }
  return DraftTree::chain(std::move(tokens), std::move(qs));
}

DraftTree tree_from_head(const HeadStep& first, int32_t width, int32_t budget, int32_t depth_limit, int64_t base,
                         const HeadLevel& level, const std::function<bool()>& stop, int64_t& forwards) {
  const int64_t V = first.logits.cols(), H = first.hidden.cols();
  width = std::min<int32_t>({width, budget, static_cast<int32_t>(V)});
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const float* l = first.logits.row(0);
  std::partial_sort(order.begin(), order.begin() + width, order.end(),
                    [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  DraftTree tree;
  std::vector<int32_t> nodes;  // the current level's
  Rows hidden(width, H);
  for (int32_t i = 0; i < width; ++i) {
    nodes.push_back(tree.size());
    tree.tokens.push_back(order[static_cast<size_t>(i)]);
    tree.parents.push_back(-1);
    std::memcpy(hidden.row(i), first.hidden.row(0), static_cast<size_t>(H) * sizeof(float));
  }
  // Each level's forward gives the next level's tokens.
  for (int32_t depth = 1; depth < depth_limit && tree.size() + static_cast<int32_t>(nodes.size()) <= budget; ++depth) {
    if (stop && stop()) break;
    const int64_t n = static_cast<int64_t>(nodes.size()), cols = base + tree.size();
    const AttentionMask all = tree_attention_mask(tree.parents, base);
    AttentionMask mask(n, cols);
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(mask.row(i), all.row(nodes[static_cast<size_t>(i)]), static_cast<size_t>(cols));
      tokens.push_back(tree.tokens[static_cast<size_t>(nodes[static_cast<size_t>(i)])]);
    }
    HeadStep step = level(tokens, hidden, std::vector<int64_t>(static_cast<size_t>(n), base + depth - 1), std::move(mask));
    forwards += 1;
    std::vector<int32_t> next;
    for (int64_t i = 0; i < n; ++i) {
      next.push_back(tree.size());
      tree.tokens.push_back(greedy_token(step.logits.row(i), V));
      tree.parents.push_back(nodes[static_cast<size_t>(i)]);
    }
    nodes = std::move(next);
    hidden = std::move(step.hidden);
  }
  return tree;
}

}  // namespace splitspec

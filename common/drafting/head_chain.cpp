#include "common/drafting/head_chain.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

namespace {

// Row `logits`' log-probabilities' normalizer: log sum exp.
double log_normalizer(const float* logits, int64_t V) {
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < V; ++t) top = std::max(top, logits[t]);
  double sum = 0;
  for (int64_t t = 0; t < V; ++t) sum += std::exp(static_cast<double>(logits[t] - top));
  return static_cast<double>(top) + std::log(sum);
}

// A candidate node: its parent's row in the level's forward, its token, and
// the log-probability of its path.
struct PathCandidate {
  int64_t row;
  int32_t token;
  double score;
};

// The `k` most probable tokens of each row, scored by path: the `k` best
// over all rows (ties: the earlier row, then the lower id, so a tree is the
// same on every run).
std::vector<PathCandidate> best_continuations(const Rows& logits, const std::vector<double>& path, int32_t k) {
  const int64_t V = logits.cols();
  std::vector<PathCandidate> all;
  std::vector<int32_t> order(static_cast<size_t>(V));
  for (int64_t r = 0; r < logits.rows(); ++r) {
    const float* l = logits.row(r);
    const double norm = log_normalizer(l, V);
    std::iota(order.begin(), order.end(), 0);
    const int32_t take = std::min<int32_t>(k, static_cast<int32_t>(V));
    std::partial_sort(order.begin(), order.begin() + take, order.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    for (int32_t i = 0; i < take; ++i) {
      const int32_t t = order[static_cast<size_t>(i)];
      if (std::isinf(l[t])) break;  // outside a shortlist
      all.push_back({r, t, path[static_cast<size_t>(r)] + static_cast<double>(l[t]) - norm});
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const PathCandidate& a, const PathCandidate& b) { return a.score > b.score; });
  if (static_cast<int32_t>(all.size()) > k) all.resize(static_cast<size_t>(k));
  return all;
}

}  // namespace

DraftTree tree_from_head(const HeadStep& first, int32_t width, int32_t budget, int32_t depth_limit, int64_t base,
                         const HeadLevel& level, const std::function<bool()>& stop, int64_t& forwards) {
  const int64_t H = first.hidden.cols();
  width = std::min<int32_t>({width, budget, static_cast<int32_t>(first.logits.cols())});
  DraftTree tree;
  std::vector<int32_t> nodes;  // the current level's
  std::vector<double> path;    // their paths' log-probabilities
  Rows hidden;                 // their parents' outputs, which their forward reads
  // Each level keeps the `width` most probable paths of those one token
  // longer than the last level's (EAGLE-2's expansion): a tree may branch
  // at any depth, where the head is least sure.
  auto add_level = [&](const std::vector<PathCandidate>& chosen, const std::vector<int32_t>& parents, const Rows& outputs) {
    std::vector<int32_t> next;
    std::vector<double> scores;
    Rows h(static_cast<int64_t>(chosen.size()), H);
    for (size_t i = 0; i < chosen.size(); ++i) {
      next.push_back(tree.size());
      tree.tokens.push_back(chosen[i].token);
      tree.parents.push_back(parents.empty() ? -1 : parents[static_cast<size_t>(chosen[i].row)]);
      scores.push_back(chosen[i].score);
      std::memcpy(h.row(static_cast<int64_t>(i)), outputs.row(chosen[i].row), static_cast<size_t>(H) * sizeof(float));
    }
    nodes = std::move(next);
    path = std::move(scores);
    hidden = std::move(h);
  };
  add_level(best_continuations(first.logits, {0.0}, width), {}, first.hidden);
  // Each level's forward gives the next level's tokens.
  for (int32_t depth = 1; depth < depth_limit && !nodes.empty() &&
                          tree.size() + static_cast<int32_t>(nodes.size()) <= budget;
       ++depth) {
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
    add_level(best_continuations(step.logits, path, width), nodes, step.hidden);
  }
  return tree;
}

}  // namespace splitspec

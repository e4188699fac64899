#include "common/decoding/verify.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/kernels/kernels.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

// p <- norm(max(0, p - q)). Returns false when nothing is left, which only
// happens when p == q up to rounding; p is then left as it was, which is the
// correct distribution in that limit.
bool subtract_and_normalise(Distribution& p, const Distribution& q) {
  double total = 0.0;
  Distribution r(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    r[i] = std::max(0.0f, p[i] - q[i]);
    total += r[i];
  }
  if (!(total > 0.0)) return false;
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(r[i] / total);
  return true;
}

// The same for a one-hot q at x: p without x, renormalised.
bool remove_and_normalise(Distribution& p, int32_t x) {
  const double rest = 1.0 - static_cast<double>(p[x]);
  if (!(rest > 0.0)) return false;
  p[x] = 0.0f;
  for (float& v : p) v = static_cast<float>(v / rest);
  return true;
}

}  // namespace

Verdict verify_tree_greedy(const DraftTree& tree, int64_t vocab, const std::function<int32_t(int64_t row)>& argmax) {
  tree.validate(vocab, false);
  Verdict v;
  int32_t node = -1;  // the root
  while (true) {
    const int32_t want = argmax(node + 1);
    int32_t next = -1;
    for (int32_t c : tree.children(node))
      if (tree.tokens[c] == want) {
        next = c;
        break;
      }
    v.tokens.push_back(want);
    if (next < 0) return v;
    v.accepted += 1;
    v.path.push_back(next);
    node = next;
  }
}

Verdict verify_tree(const DraftTree& tree, RowsView target_logits, const SamplingParams& params, Rng& rng) {
  const int64_t vocab = target_logits.cols;
  if (target_logits.rows != tree.size() + 1)
    throw Error("verify: expected target logits [" + std::to_string(tree.size() + 1) + ", vocab]");
  if (params.greedy())
    return verify_tree_greedy(tree, vocab, [&](int64_t row) { return greedy_token(target_logits.row(row), vocab); });
  tree.validate(vocab, true);

  Verdict v;
  int32_t node = -1;  // the root
  while (true) {
    const std::vector<int32_t> kids = tree.children(node);
    int32_t next = -1;
    Distribution p = filtered_distribution(target_logits.row(node + 1), vocab, params);
    for (int32_t c : kids) {
      const int32_t x = tree.tokens[c];
      const Distribution* q = tree.q_of(c);
      const float qx = q ? (*q)[x] : 1.0f;
      // Accept with probability min(1, p(x)/q(x)), written without division.
      if (rng.uniform() * qx < p[x]) {
        next = c;
        break;
      }
      if (q)
        subtract_and_normalise(p, *q);
      else
        remove_and_normalise(p, x);
    }
    if (next < 0) {
      v.tokens.push_back(rng.categorical(p));
      return v;
    }
    v.accepted += 1;
    v.tokens.push_back(tree.tokens[next]);
    v.path.push_back(next);
    node = next;
  }
}

int64_t verdict_row(const Verdict& verdict, size_t i) { return i == 0 ? 0 : verdict.path[i - 1] + 1; }

TopK top_k_of_row(const float* lg, int64_t vocab, int64_t k, std::vector<int32_t>& idx) {
  const int64_t n = std::min<int64_t>(k, vocab);
  idx.resize(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                    [&](int32_t a, int32_t b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
  const float max = lg[idx[0]];
  const float inv = 1.0f / kernels::sum_exp(lg, vocab, max);
  TopK t;
  for (int64_t i = 0; i < n; ++i) {
    t.ids.push_back(idx[i]);
    t.probs.push_back(std::exp(lg[idx[i]] - max) * inv);
  }
  return t;
}

std::vector<TopK> top_k_of(RowsView rows, int32_t k) {
  std::vector<TopK> out;
  if (rows.rows == 0 || k <= 0) return out;
  std::vector<int32_t> scratch;
  for (int64_t r = 0; r < rows.rows; ++r) out.push_back(top_k_of_row(rows.row(r), rows.cols, k, scratch));
  return out;
}

}  // namespace splitspec

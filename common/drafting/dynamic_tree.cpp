#include "common/drafting/dynamic_tree.h"

#include <cmath>
#include <deque>
#include <queue>

#include "common/util/error.h"

namespace splitspec {

void DynamicTreeOptions::validate() const {
  if (budget < 0) throw Error("lut: budget must be >= 0");
  if (!(depth_decay > 0 && depth_decay <= 1)) throw Error("lut: depth decay (delta) must be in (0, 1]");
  if (!(width_decay > 0 && width_decay <= 1)) throw Error("lut: width decay (alpha) must be in (0, 1]");
  if (!(threshold >= 0 && threshold < 1)) throw Error("lut: threshold (tau) must be in [0, 1)");
  if (max_depth < 1) throw Error("lut: max depth must be at least 1");
  if (static_width < 1 || static_root_width < 1) throw Error("lut: static tree widths must be at least 1");
}

DynamicTree build_dynamic_tree(const CandidateSource& source, const DynamicTreeOptions& o) {
  DynamicTree out;
  DraftTree& t = out.tree;
  std::vector<double> cumulative;
  std::vector<int32_t> depth;
  std::vector<LutCandidate> c;

  // Adds the candidates after `parent` that `take` admits; returns the nodes added.
  auto expand = [&](int32_t parent, const std::function<bool(size_t rank, double score)>& take) {
    std::vector<int32_t> added;
    const int32_t d = parent < 0 ? 1 : depth[parent] + 1;
    if (d > o.max_depth || t.size() >= o.budget) return added;
    source(t, parent, c);
    out.expansions += 1;
    const double base = parent < 0 ? 1.0 : cumulative[parent];
    for (size_t rank = 0; rank < c.size() && t.size() < o.budget; ++rank) {
      const double p = base * static_cast<double>(c[rank].prob);
      const double score = p * std::pow(o.depth_decay, d - 1) * std::pow(o.width_decay, static_cast<double>(rank));
      if (!take(rank, score)) continue;
      added.push_back(t.size());
      t.tokens.push_back(c[rank].token);
      t.parents.push_back(parent);
      cumulative.push_back(p);
      depth.push_back(d);
      out.scores.push_back(score);
    }
    return added;
  };

  if (o.static_shape) {
    std::deque<int32_t> next;
    for (int32_t n : expand(-1, [&](size_t rank, double) { return rank < static_cast<size_t>(o.static_root_width); }))
      next.push_back(n);
    while (!next.empty() && t.size() < o.budget) {
      const int32_t v = next.front();
      next.pop_front();
      for (int32_t n : expand(v, [&](size_t rank, double) { return rank < static_cast<size_t>(o.static_width); }))
        next.push_back(n);
    }
    return out;
  }

  // Candidates wait in the queue, best score first (among equals, the one
  // queued first); the best becomes a node and queues its own candidates.
  struct Pending {
    double score, prob;
    int32_t parent, token, depth;
    int64_t order;
  };
  auto worse = [](const Pending& a, const Pending& b) {
    return a.score != b.score ? a.score < b.score : a.order > b.order;
  };
  std::priority_queue<Pending, std::vector<Pending>, decltype(worse)> queue(worse);
  int64_t queued = 0;
  auto add_node = [&](const Pending& p) {
    t.tokens.push_back(p.token);
    t.parents.push_back(p.parent);
    cumulative.push_back(p.prob);
    depth.push_back(p.depth);
    out.scores.push_back(p.score);
  };
  auto queue_children = [&](int32_t parent) {
    const int32_t d = parent < 0 ? 1 : depth[parent] + 1;
    if (d > o.max_depth) return;
    source(t, parent, c);
    out.expansions += 1;
    const double base = parent < 0 ? 1.0 : cumulative[parent];
    for (size_t rank = 0; rank < c.size(); ++rank) {
      const double p = base * static_cast<double>(c[rank].prob);
      const double score = p * std::pow(o.depth_decay, d - 1) * std::pow(o.width_decay, static_cast<double>(rank));
      // Pruned below tau, but the root's best always enters.
      if (score < o.threshold && !(parent < 0 && rank == 0)) continue;
      queue.push({score, p, parent, c[rank].token, d, queued++});
    }
  };
  if (o.budget > 0) queue_children(-1);
  while (!queue.empty() && t.size() < o.budget) {
    const Pending best = queue.top();
    queue.pop();
    add_node(best);
    if (t.size() < o.budget) queue_children(t.size() - 1);
  }
  return out;
}

}  // namespace splitspec

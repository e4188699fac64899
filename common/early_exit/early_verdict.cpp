#include "common/early_exit/early_verdict.h"

#include "common/decoding/sampling.h"
#include "common/kernels/kernels.h"

namespace splitspec {

namespace {

// The rows whose top token decided `v`: the root, then each accepted node.
std::vector<int64_t> decided_rows(const Verdict& v) {
  std::vector<int64_t> rows{0};
  for (int32_t node : v.path) rows.push_back(node + 1);
  return rows;
}

// Greedy: the exit's scores over its shortlist decide everything. Spreading
// them over the vocabulary first and taking a vocabulary-wide softmax cost
// about as much as the exit's own matrix products.
EarlyVerdict greedy_at_exit(const Backend& model, const EarlyExits& exits, size_t exit_index, RowsView rows,
                            const DraftTree& tree) {
  EarlyVerdict e;
  const Rows s = exits.scores(model, exit_index, rows);
  const int64_t k = s.cols();
  const float* base = s.data();
  std::vector<int32_t> top(static_cast<size_t>(s.rows()));  // each row's best column
  for (int64_t r = 0; r < s.rows(); ++r) top[static_cast<size_t>(r)] = greedy_token(base + r * k, k);
  e.verdict = verify_tree_greedy(tree, model.config().vocab_size,
                                 [&](int64_t r) { return exits.scored_token(top[static_cast<size_t>(r)]); });
  e.confidence = 1.0;
  for (int64_t r : decided_rows(e.verdict)) {
    const float* p = base + r * k;
    e.confidence /= kernels::sum_exp(p, k, p[top[static_cast<size_t>(r)]]);
  }
  return e;
}

}  // namespace

EarlyVerdict verify_at_exit(const Backend& model, const EarlyExits& exits, size_t exit_index, RowsView rows,
                            const DraftTree& tree, const SamplingParams& params, Rng rng, bool want_hidden) {
  EarlyVerdict e;
  if (params.greedy()) {
    e = greedy_at_exit(model, exits, exit_index, rows, tree);
  } else {
    const Rows logits = exits.logits(model, exit_index, rows);
    e.verdict = verify_tree(tree, logits, params, rng);
    const int64_t V = logits.cols();
    e.confidence = 1.0;
    for (int64_t r : decided_rows(e.verdict)) {
      const float* p = logits.row(r);
      e.confidence /= kernels::sum_exp(p, V, p[greedy_token(p, V)]);
    }
  }
  e.after_layer = exits.adapters().at(exit_index).after_layer;
  if (want_hidden && !e.verdict.tokens.empty()) {
    const int64_t row = verdict_row(e.verdict, e.verdict.tokens.size() - 1);
    const Rows h = exits.final_hidden(model, exit_index, rows.slice(row, 1));
    e.hidden.assign(h.data(), h.data() + h.size());
  }
  return e;
}

}  // namespace splitspec

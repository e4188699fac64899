#include "common/early_verdict.h"

#include <ATen/ATen.h>

namespace splitspec {

EarlyVerdict verify_at_exit(const Model& model, const EarlyExits& exits, size_t exit_index, const at::Tensor& rows,
                            const DraftTree& tree, const SamplingParams& params, Rng rng) {
  EarlyVerdict e;
  e.after_layer = exits.adapters().at(exit_index).after_layer;
  const at::Tensor logits = exits.logits(model, exit_index, rows);
  e.verdict = verify_tree(tree, logits, params, rng);
  // Rows that decided the verdict: the root, then each accepted node.
  std::vector<int64_t> decided{0};
  for (int32_t node : e.verdict.path) decided.push_back(node + 1);
  const at::Tensor sel = logits.index_select(0, at::tensor(decided, at::TensorOptions().dtype(at::kLong)));
  const at::Tensor top = std::get<0>(at::softmax(sel, -1).max(-1));
  e.confidence = top.prod().item<double>();
  return e;
}

}  // namespace splitspec

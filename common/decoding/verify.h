#pragma once
// Verification of drafted tokens against the target, exact by construction:
// greedy verification reproduces the target's argmax sequence, and
// stochastic verification (speculative sampling; SpecInfer-style
// multi-candidate for trees) emits tokens distributed exactly as the target's
// filtered distribution p.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "common/decoding/sampling.h"
#include "common/decoding/token_tree.h"

namespace splitspec {

struct Verdict {
  int32_t accepted = 0;         // draft tokens accepted
  std::vector<int32_t> tokens;  // the accepted draft tokens, then one target token
  std::vector<int32_t> path;    // tree nodes accepted, root to leaf
};

// `target_logits` is [tree.size()+1, vocab]: row 0 is the target's prediction
// after the root (the last committed token), row i+1 after draft node i.
// Under greedy params the draft is accepted while it matches the target's
// argmax. Otherwise, at each node the children are tried in order: child x
// drawn from q is accepted with probability min(1, p(x)/q(x)); on rejection p
// becomes norm(max(0, p - q)) for the next child; when no child is accepted
// the emitted token is drawn from what remains of p. A leaf's successor (the
// bonus token) is drawn from p.
Verdict verify_tree(const DraftTree& tree, const at::Tensor& target_logits, const SamplingParams& params, Rng& rng);

// Greedy verification from each row's argmax alone (`argmax(r)` for row r as
// above, asked only for the rows the walk reaches): what verify_tree does
// under greedy params, for callers that find the argmax without full-vocabulary
// logits.
Verdict verify_tree_greedy(const DraftTree& tree, int64_t vocab, const std::function<int32_t(int64_t row)>& argmax);

// The chain case: draft tokens d_1..d_g with their q (sampling only) and
// target logits [g+1, vocab].
Verdict verify_chain(std::vector<int32_t> draft, std::vector<Distribution> q,
                     const at::Tensor& target_logits, const SamplingParams& params, Rng& rng);

}  // namespace splitspec

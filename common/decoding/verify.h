#pragma once
// Verification of drafted tokens against the target, exact by construction:
// greedy verification reproduces the target's argmax sequence, and
// stochastic verification (speculative sampling; SpecInfer-style
// multi-candidate for trees) emits tokens distributed exactly as the target's
// filtered distribution p.
#include <cstdint>
#include <functional>
#include <vector>

#include "common/decoding/sampling.h"
#include "common/decoding/token_tree.h"
#include "common/model/rows.h"

namespace splitspec {

struct Verdict {
  int32_t accepted = 0;         // draft tokens accepted
  std::vector<int32_t> tokens;  // the accepted draft tokens, then one target token
  std::vector<int32_t> path;    // tree nodes accepted, root to leaf
};

// What some drafters learn from beyond the verdict (DIAA's tables, ReDrafter's
// head); a verifier fills what the drafter asks for, and nothing otherwise.
struct ExtrasRequest {
  int32_t top_k = 0;    // the target's K most probable tokens at each appended token's position
  bool hidden = false;  // the target's final hidden state at the last accepted position
  // The target's final hidden state at every position the round commits a
  // token after (VerdictExtras::hidden_rows): a model's own MTP head pairs
  // each with the token that follows it.
  bool hidden_rows = false;
  // With hidden_rows: instead of the final hidden state, the inputs of these
  // layers (the residual stream entering each; the layer count names the
  // final hidden state after the final norm), side by side in each row: an
  // EAGLE-3 head reads three.
  std::vector<int32_t> hidden_row_layers;
  // The keys and values every position the round commits to the target's
  // cache leaves in these layers (VerdictExtras::kv_rows): a drafter that
  // attends over the target's own keys (Gemma 4's assistant) reads them.
  std::vector<int32_t> kv_row_layers;
  bool any() const { return top_k > 0 || hidden || hidden_rows || !kv_row_layers.empty(); }
};

struct TopK {
  std::vector<int32_t> ids;  // most probable first
  std::vector<float> probs;  // softmax at temperature 1, before any sampling filter
};

struct VerdictExtras {
  // One per appended token (Verdict::tokens): the target's top K at the
  // position that produced it.
  std::vector<TopK> top_k;
  // After the final norm, at the row that produced the last appended token
  // (the last accepted node, or the root): what the LM head reads there.
  std::vector<float> hidden;
  // After the final norm, [rows, hidden] one after another: at each
  // committed token the round's forward carried but the last (the prompt's
  // in round one; none after), then at each row that produced an appended
  // token (the root's, then the accepted nodes'). Row i is the position
  // whose successor is the i-th token committed after the forward's first.
  // With hidden_row_layers, each row is those layers' inputs side by side.
  std::vector<float> hidden_rows;
  // The position of hidden_rows' first row: the round's first forwarded
  // token's (0 in a generation's first round, or a resumed one's).
  int64_t hidden_rows_from = 0;
  // Per position entering the target's cache this round (the prompt's in
  // round one, then the root and each accepted node but the last), for each
  // of kv_row_layers in turn: its keys, then its values [kv heads x head
  // size] each, as the cache holds them; kv_rows_from is the first's position.
  std::vector<float> kv_rows;
  int64_t kv_rows_from = 0;
};

// `target_logits` is [tree.size()+1, vocab]: row 0 is the target's prediction
// after the root (the last committed token), row i+1 after draft node i.
// Under greedy params the draft is accepted while it matches the target's
// argmax. Otherwise, at each node the children are tried in order: child x
// drawn from q is accepted with probability min(1, p(x)/q(x)); on rejection p
// becomes norm(max(0, p - q)) for the next child; when no child is accepted
// the emitted token is drawn from what remains of p. A leaf's successor (the
// bonus token) is drawn from p. A node chosen deterministically has a one-hot
// q: it is accepted with probability p(x), and on rejection x leaves p.
Verdict verify_tree(const DraftTree& tree, RowsView target_logits, const SamplingParams& params, Rng& rng);

// Greedy verification from each row's argmax alone (`argmax(r)` for row r as
// above, asked only for the rows the walk reaches): what verify_tree does
// under greedy params, for callers that find the argmax without full-vocabulary
// logits.
Verdict verify_tree_greedy(const DraftTree& tree, int64_t vocab, const std::function<int32_t(int64_t row)>& argmax);

// The row of the target logits that produced the verdict's token i: the root's
// (0) for the first, then the accepted nodes' (path[i-1] + 1).
int64_t verdict_row(const Verdict& verdict, size_t i);

// The top `k` of one row of `vocab` logits: highest first, ties by the lower
// id (the project's tie rule), with their softmax probabilities. `scratch`
// is reused between calls.
TopK top_k_of_row(const float* logits, int64_t vocab, int64_t k, std::vector<int32_t>& scratch);
// The top `k` of each of `rows` ([m, vocab] logits), as VerdictExtras holds them.
std::vector<TopK> top_k_of(RowsView rows, int32_t k);

}  // namespace splitspec

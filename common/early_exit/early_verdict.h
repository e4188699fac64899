#pragma once
// A round's verdict predicted at an early exit: the draft verified against
// the exit's logits by the same rule as the final verification, with a copy
// of the verifier's random state so that, where the exit agrees with the
// final layer, it makes the same decisions. Only a prediction: the final
// layer alone decides what is committed.
#include <vector>

#include "common/early_exit/early_exit.h"
#include "common/decoding/verify.h"

namespace splitspec {

struct EarlyVerdict {
  int64_t after_layer = 0;
  Verdict verdict;
  // How likely the whole verdict is to be the final one: the product, over
  // the positions that decided it (each accepted draft token and the next
  // token), of the exit's top softmax probability there (the paper's Eq. 4
  // per position). A product because the verdict is right only if every one
  // of those decisions is; the paper's max over positions would rate a
  // verdict by its easiest position.
  double confidence = 0;
  // When asked for: the exit's final hidden state (EarlyExits::final_hidden)
  // at the row that produced the verdict's last token, as a final verdict
  // carries the target's.
  std::vector<float> hidden;
};

// `rows` are the hidden states after the exit's layer at the rows the final
// verification reads ([tree.size()+1, hidden]).
EarlyVerdict verify_at_exit(const Backend& model, const EarlyExits& exits, size_t exit_index, RowsView rows,
                            const DraftTree& tree, const SamplingParams& params, Rng rng, bool want_hidden = false);

}  // namespace splitspec

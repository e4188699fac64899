#pragma once
// What the heads that draft from the target's own rows (mtp_head.h,
// eagle3_head.h) give for a step, and how their drafters chain steps: each
// draft from the step before, chosen greedily or drawn.
#include <cstdint>
#include <functional>

#include "common/decoding/sampling.h"
#include "common/decoding/token_tree.h"
#include "common/model/rows.h"

namespace splitspec {

// A head's step: the last row's logits over the target's vocabulary
// [1, vocab], and its output [1, hidden], which the next step reads.
struct HeadStep {
  Rows logits;
  Rows hidden;
};

// A chain of up to `k` drafts: the first from `first`, each next from
// step(previous draft, previous output). Greedy: the argmax, no q; else drawn
// under `sampling`, carrying what it was drawn from as q. `stop`, checked
// between steps, cuts it short; `forwards` counts the steps run.
DraftTree chain_from_head(const HeadStep& first, int32_t k, const SamplingParams& sampling, Rng& rng,
                          const std::function<HeadStep(int32_t token, const Rows& hidden)>& step,
                          const std::function<bool()>& stop, int64_t& forwards);

}  // namespace splitspec

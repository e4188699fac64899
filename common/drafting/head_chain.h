#pragma once
// What the heads that draft from the target's own rows (mtp_head.h,
// eagle3_head.h) give for a step, and how their drafters chain steps: each
// draft from the step before, chosen greedily or drawn.
#include <cstdint>
#include <functional>

#include <vector>

#include "common/decoding/sampling.h"
#include "common/decoding/token_tree.h"
#include "common/model/attention_mask.h"
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

// A tree for a head with its own KV cache (mtp, eagle3, assistant): `first`'s
// `width` most probable tokens, then level by level the `width` most
// probable paths one token longer (each node's `width` best tokens, scored
// by their path's log-probability under the head), while the depth stays
// under `depth_limit` and the tree within `budget`. `level`
// runs a level's nodes through the head after the cache's `base` entries
// (the tree's nodes go in at base, base + 1, ... in the tree's order): their
// tokens, their parents' outputs [n, hidden], positions base + depth - 1,
// and their rows of the tree's mask [n, base + nodes so far]; it returns
// every row's logits and output. The nodes are chosen deterministically, so
// they are verified as one-hot q.
using HeadLevel = std::function<HeadStep(const std::vector<int32_t>& tokens, const Rows& hidden,
                                         std::vector<int64_t> positions, AttentionMask mask)>;
DraftTree tree_from_head(const HeadStep& first, int32_t width, int32_t budget, int32_t depth_limit, int64_t base,
                         const HeadLevel& level, const std::function<bool()>& stop, int64_t& forwards);

}  // namespace splitspec

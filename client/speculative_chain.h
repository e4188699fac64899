#pragma once
// Chain speculative decoding with draft and target in this process: the draft
// proposes gamma tokens, the target verifies them in one forward, both KV
// caches roll back to the accepted prefix. Exact: greedy output equals the
// target's own; sampled output has the target's distribution.
#include <vector>

#include "client/generation.h"
#include "common/engine/model.h"
#include "common/drafting/model_drafter.h"

namespace splitspec {

struct SpeculationStats {
  DrafterStats draft;             // per-position acceptance, drafting time
  int64_t rounds = 0;
  double tau = 0;                 // mean tokens emitted per round
  double target_ms = 0;           // all verification forwards
  int64_t target_forwards = 0;    // verification forwards
};

struct SpeculativeGeneration {
  Generation generation;
  SpeculationStats spec;
};

// Throws splitspec::Error when draft and target vocabularies differ, or for
// the prompt and option errors generate_local_ar reports.
SpeculativeGeneration generate_speculative_chain(const Model& target, const Model& draft,
                                                 const std::vector<int32_t>& prompt_ids, const GenerateOptions& options,
                                                 int32_t gamma, const TokenCallback& on_token = {});

}  // namespace splitspec

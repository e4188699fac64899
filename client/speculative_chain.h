#pragma once
// Chain speculative decoding with draft and target in this process: the draft
// proposes gamma tokens, the target verifies them in one forward, both KV
// caches roll back to the accepted prefix. Exact: greedy output equals the
// target's own; sampled output has the target's distribution.
#include <vector>

#include "client/generation.h"
#include "common/model.h"
#include "common/model_drafter.h"

namespace splitspec {

struct SpeculationStats {
  int64_t rounds = 0;
  std::vector<int64_t> proposed;  // per draft position: rounds that drafted it
  std::vector<int64_t> accepted;  // per draft position: rounds that accepted it
  double tau = 0;                 // mean tokens emitted per round
  double draft_ms = 0;            // all draft forwards
  double target_ms = 0;           // all target forwards (prefill excluded)
  int64_t draft_forwards = 0;
  int64_t target_forwards = 0;    // verification forwards
  std::vector<double> acceptance_per_position() const;
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

// Folds a drafter's counters into the stats every speculative mode reports.
void add_drafter_stats(const DrafterStats& d, SpeculationStats& s);

}  // namespace splitspec

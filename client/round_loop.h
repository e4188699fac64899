#pragma once
// The one decoding loop every mode runs: the drafter proposes a token tree,
// the verifier verifies it, the drafter accepts the outcome, until a stop
// rule (EOS, max_new_tokens, the context) or the deadline. With pre-drafting
// (the early-exit edge-cloud paper's FSD), workers draft the next round on
// the verifier's early verdicts while the round is verified, for any drafter
// that can fork. Local and edge modes, chains and trees, are this loop with
// another drafter or verifier.
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "client/cancellation.h"
#include "client/client_stats.h"
#include "client/predraft.h"
#include "client/predraft_switch.h"
#include "client/verifier.h"
#include "common/drafting/drafter.h"

namespace splitspec {

struct RoundLoopOptions {
  GenerateOptions generate;
  SpeculativeParams speculative;  // the request's, for the drafter as they are
  double draft_slowdown = 1;  // DraftParams::slowdown: an emulated slower device
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // Pre-drafting on early verdicts: needs a verifier that streams them and a
  // drafter that forks.
  bool predraft = false;
  int predraft_threads = 1;
  QueuePolicy predraft_queue = QueuePolicy::kPriority;
  // Pre-draft only while it measurably pays (null: every round).
  PredraftSwitch* predraft_switch = nullptr;
  // Stops the loop at the next round boundary (and interrupts a round in
  // flight through the verifier); null: only the deadline does.
  Cancellation* cancel = nullptr;
};


struct RoundLoopResult {
  std::vector<int32_t> ids;  // generated
  FinishReason finish = FinishReason::kNone;
  // The parts of the public Stats the loop measures, under their names: the
  // clock (TimingStats), the rounds and their drafts' counts (DraftStats:
  // rounds, drafted_tokens, accepted_tokens, branched_trees) and
  // pre-drafting (PredraftStats). The drafter's and the verifier's parts
  // are theirs.
  Stats stats;
};

// `on_token` sees each committed token once; returning false stops the loop
// there (finish kCancelled), as a cancel does.
// Throws splitspec::Error for a prompt or options the verifier refuses, a
// combination that cannot work (pre-drafting without early verdicts or with
// a drafter that cannot fork), a drafter over its budget, the deadline, and
// whatever the verifier reports.
RoundLoopResult run_round_loop(Drafter& drafter, Verifier& verifier, const std::vector<int32_t>& prompt,
                               const RoundLoopOptions& options, const std::function<bool(int32_t)>& on_token = {});

}  // namespace splitspec

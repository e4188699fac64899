#pragma once
// What a generation measured (client.h's Result::stats). Part of the public
// API: the installed <splitspec/client.h> holds this file's text
// (client/package/CMakeLists.txt), so it includes standard headers only.
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "common/drafting/drafter_counts.h"

namespace splitspec {

// What a generation measured, in parts: the clock, the drafting, the
// target's forwards, the link to the server, pre-drafting and faults. Each
// part lists its fields once (fields()), which is what sums it, what the
// CLI prints as JSON and what Python shows. Stats derives from the parts, so
// each field is reached as before (stats.tau, stats.resumes).
//
// Sums: `total += r.stats` adds a generation to a total the way each field
// adds up (Merge), then recomputes the means, rates and percentiles from
// the sums, so a total's tau is its tokens over its rounds, not a mean of
// means.
enum class Merge {
  kSum,      // counts and totals
  kMax,      // peaks and sizes
  kLast,     // a level at the end: the later generation's
  kAppend,   // samples
  kDerived,  // a mean, rate or percentile of the others (Stats::derive)
};

// The clock.
struct TimingStats {
  int64_t new_tokens = 0;
  double wall_ms = 0;          // the whole call
  double ms_per_token = 0;
  double first_token_ms = 0;   // until the first generated token arrived
  // The prompt's target forward (with the first round's draft; server modes:
  // as the server reports it; cloud-ar: the time to the first token).
  double prefill_ms = 0;
  double decode_ms = 0;              // after the first round: wall_ms - first_token_ms
  int64_t decode_tokens = 0;         // tokens after the first round's
  double decode_tokens_per_s = 0;    // decode_tokens per second of decode_ms
  // Per-token latency after the first round: each token charged its round's
  // time (verdict to verdict) over the round's tokens; cloud-ar: the gap
  // between the server's messages. The worst token, not only the mean.
  double token_ms_p50 = 0, token_ms_p90 = 0, token_ms_p99 = 0, token_ms_max = 0;
  std::vector<double> token_ms;  // the samples themselves, in order

  template <class V>
  static void fields(V&& v) {
    using T = TimingStats;
    v("new_tokens", &T::new_tokens, Merge::kSum);
    v("wall_ms", &T::wall_ms, Merge::kSum);
    v("ms_per_token", &T::ms_per_token, Merge::kDerived);
    v("first_token_ms", &T::first_token_ms, Merge::kSum);
    v("prefill_ms", &T::prefill_ms, Merge::kSum);
    v("decode_ms", &T::decode_ms, Merge::kSum);
    v("decode_tokens", &T::decode_tokens, Merge::kSum);
    v("decode_tokens_per_s", &T::decode_tokens_per_s, Merge::kDerived);
    v("token_ms_p50", &T::token_ms_p50, Merge::kDerived);
    v("token_ms_p90", &T::token_ms_p90, Merge::kDerived);
    v("token_ms_p99", &T::token_ms_p99, Merge::kDerived);
    v("token_ms_max", &T::token_ms_max, Merge::kDerived);
    v("token_ms", &T::token_ms, Merge::kAppend);
  }
};

// Rounds of drafting and verification, and the drafter on this device.
// The drafter's own counts (proposed_per_position, accepted_per_position,
// draft_ms, draft_forwards, drafter_counters, and model-tree's final_alpha,
// provisional_tokens and provisional_kept) are its DrafterCounts, which the
// drafter fills under these names (common/drafting/drafter_counts.h).
struct DraftStats : DrafterCounts {
  int64_t rounds = 0;
  double tau = 0;                     // tokens per round
  int64_t drafted_tokens = 0;         // draft tokens (tree nodes) sent to the target
  int64_t accepted_tokens = 0;        // of those, accepted
  double acceptance_rate = 0;         // accepted / drafted tokens
  std::vector<double> acceptance_per_position;  // accepted over proposed, per position
  double accepted_per_round = 0;      // draft tokens accepted per verification
  double tree_nodes = 0;              // mean draft nodes per round
  int64_t branched_trees = 0;         // rounds whose draft was not a chain
  uint64_t drafter_memory_bytes = 0;  // what the drafter holds (KV cache, trees), at the end
  double emulated_draft_factor = 1;   // ClientOptions::emulate_draft_factor: above 1, draft times are emulated

  template <class V>
  static void fields(V&& v) {
    using T = DraftStats;
    v("rounds", &T::rounds, Merge::kSum);
    v("tau", &T::tau, Merge::kDerived);
    v("drafted_tokens", &T::drafted_tokens, Merge::kSum);
    v("accepted_tokens", &T::accepted_tokens, Merge::kSum);
    v("acceptance_rate", &T::acceptance_rate, Merge::kDerived);
    v("proposed_per_position", &T::proposed_per_position, Merge::kSum);
    v("accepted_per_position", &T::accepted_per_position, Merge::kSum);
    v("acceptance_per_position", &T::acceptance_per_position, Merge::kDerived);
    v("accepted_per_round", &T::accepted_per_round, Merge::kDerived);
    v("tree_nodes", &T::tree_nodes, Merge::kDerived);
    v("branched_trees", &T::branched_trees, Merge::kSum);
    v("draft_ms", &T::draft_ms, Merge::kSum);
    v("draft_forwards", &T::draft_forwards, Merge::kSum);
    v("drafter_memory_bytes", &T::drafter_memory_bytes, Merge::kMax);
    v("drafter_counters", &T::drafter_counters, Merge::kSum);
    v("final_alpha", &T::final_alpha, Merge::kLast);
    v("provisional_tokens", &T::provisional_tokens, Merge::kSum);
    v("provisional_kept", &T::provisional_kept, Merge::kSum);
    v("emulated_draft_factor", &T::emulated_draft_factor, Merge::kMax);
  }
};

// The target's forwards, here or on the server.
struct TargetStats {
  double target_forward_ms = 0;       // every target forward, here or on the server
  int64_t target_forwards = 0;
  double target_ms = 0;               // the local verifier's forwards
  uint64_t weight_bytes_read = 0;     // streamed target: read from disk
  uint64_t weight_memory_peak = 0;    // streamed target: most weight memory held
  double weight_stall_ms = 0;         // streamed target: forwards waiting for weights

  template <class V>
  static void fields(V&& v) {
    using T = TargetStats;
    v("target_forward_ms", &T::target_forward_ms, Merge::kSum);
    v("target_forwards", &T::target_forwards, Merge::kSum);
    v("target_ms", &T::target_ms, Merge::kSum);
    v("weight_bytes_read", &T::weight_bytes_read, Merge::kSum);
    v("weight_memory_peak", &T::weight_memory_peak, Merge::kMax);
    v("weight_stall_ms", &T::weight_stall_ms, Merge::kSum);
  }
};

// The server verifier's link.
struct LinkStats {
  double verify_wait_ms = 0;          // from sending drafts to their verdict, summed
  double server_ms = 0;               // of that, time the server reports (queue, forward, verify)
  double server_forward_ms = 0;       // of that, target forwards
  double server_exits_ms = 0;         // of that, early exits (edge-fsd)
  double network_rtt_ms = 0;          // mean per round: verify wait minus server time
  int64_t verdict_bytes = 0;          // final verdicts received, serialized
  int64_t verdict_top_k_bytes = 0;    //   of those, the target's top K (the lut drafter asks for them)
  int64_t verdict_hidden_bytes = 0;   //   of those, the target's hidden states (the recurrent drafter's; every row an MTP head reads)
  int64_t draft_bytes = 0;            // drafts sent upstream, serialized
  // The server's --emulate-forward-ms (ServerInfo): nonzero, its forward
  // times, and every time measured through it, are emulated.
  double emulated_forward_fixed_ms = 0;
  double emulated_forward_per_row_ms = 0;

  template <class V>
  static void fields(V&& v) {
    using T = LinkStats;
    v("verify_wait_ms", &T::verify_wait_ms, Merge::kSum);
    v("server_ms", &T::server_ms, Merge::kSum);
    v("server_forward_ms", &T::server_forward_ms, Merge::kSum);
    v("server_exits_ms", &T::server_exits_ms, Merge::kSum);
    v("network_rtt_ms", &T::network_rtt_ms, Merge::kDerived);
    v("verdict_bytes", &T::verdict_bytes, Merge::kSum);
    v("verdict_top_k_bytes", &T::verdict_top_k_bytes, Merge::kSum);
    v("verdict_hidden_bytes", &T::verdict_hidden_bytes, Merge::kSum);
    v("draft_bytes", &T::draft_bytes, Merge::kSum);
    v("emulated_forward_fixed_ms", &T::emulated_forward_fixed_ms, Merge::kMax);
    v("emulated_forward_per_row_ms", &T::emulated_forward_per_row_ms, Merge::kMax);
  }
};

// Pre-drafting (edge-fsd).
struct PredraftStats {
  int64_t early_verdicts = 0;         // received for rounds still open
  int64_t predrafts = 0;              // pre-drafts started
  int64_t predraft_rounds = 0;        // rounds that asked for early verdicts
  int64_t predraft_lookups = 0;       // final verdicts looked up in the pre-draft cache
  int64_t predraft_hits = 0;          // of those, found (r = 1 - hits / lookups)
  int64_t predraft_waited_hits = 0;   // of those, still being drafted (waited T_r)
  double cache_miss_rate = 0;         // r: final verdicts with no pre-draft
  int64_t exit_layer_sum = 0;         // over hits: the exit whose verdict produced each
  double avg_exit_layer = 0;          // "Avg EE": exit_layer_sum / hits
  double predraft_ms = 0;             // worker drafting time
  double sync_wait_ms = 0;            // T_r: waiting for a hit's pre-draft to finish
  // From a final verdict to the next draft sent, on hits and on misses
  // (drafting included): how many, their sum and their mean.
  int64_t hit_sends = 0, miss_sends = 0;
  double hit_send_total_ms = 0, miss_send_total_ms = 0;
  double hit_send_ms = 0, miss_send_ms = 0;

  template <class V>
  static void fields(V&& v) {
    using T = PredraftStats;
    v("early_verdicts", &T::early_verdicts, Merge::kSum);
    v("predrafts", &T::predrafts, Merge::kSum);
    v("predraft_rounds", &T::predraft_rounds, Merge::kSum);
    v("predraft_lookups", &T::predraft_lookups, Merge::kSum);
    v("predraft_hits", &T::predraft_hits, Merge::kSum);
    v("predraft_waited_hits", &T::predraft_waited_hits, Merge::kSum);
    v("cache_miss_rate", &T::cache_miss_rate, Merge::kDerived);
    v("exit_layer_sum", &T::exit_layer_sum, Merge::kSum);
    v("avg_exit_layer", &T::avg_exit_layer, Merge::kDerived);
    v("predraft_ms", &T::predraft_ms, Merge::kSum);
    v("sync_wait_ms", &T::sync_wait_ms, Merge::kSum);
    v("hit_sends", &T::hit_sends, Merge::kSum);
    v("miss_sends", &T::miss_sends, Merge::kSum);
    v("hit_send_total_ms", &T::hit_send_total_ms, Merge::kSum);
    v("miss_send_total_ms", &T::miss_send_total_ms, Merge::kSum);
    v("hit_send_ms", &T::hit_send_ms, Merge::kDerived);
    v("miss_send_ms", &T::miss_send_ms, Merge::kDerived);
  }
};

// Faults (server verifier): a round whose stream broke is verified again,
// on a new session or by the fallback target.
struct FaultStats {
  int64_t resumes = 0;                // breaks after which the server verified again (a new session)
  int64_t failovers = 0;              // switches to the fallback target
  int64_t failbacks = 0;              // switches back to the server
  int64_t server_rounds = 0;          // rounds whose verdict came from the server
  int64_t fallback_rounds = 0;        // from the fallback target
  int64_t retried_rounds = 0;         // rounds sent again after a break: lost work
  double switch_ms = 0;               // from each break to the verdict that followed it, summed
  // Generations that started on the fallback, the server not reached since
  // connect (an offline start).
  int64_t offline_starts = 0;
  // Of the failovers, moves made because the server's measured round times
  // said the rest would miss the request's deadline.
  int64_t deadline_failovers = 0;
  // 1 when the fallback target verified rounds of the generation and
  // computes with other numerics than the server (its backend, arithmetic
  // or kernels): the tokens mix two definitions of the target.
  int64_t mixed_numerics = 0;

  template <class V>
  static void fields(V&& v) {
    using T = FaultStats;
    v("resumes", &T::resumes, Merge::kSum);
    v("failovers", &T::failovers, Merge::kSum);
    v("failbacks", &T::failbacks, Merge::kSum);
    v("server_rounds", &T::server_rounds, Merge::kSum);
    v("fallback_rounds", &T::fallback_rounds, Merge::kSum);
    v("retried_rounds", &T::retried_rounds, Merge::kSum);
    v("switch_ms", &T::switch_ms, Merge::kSum);
    v("offline_starts", &T::offline_starts, Merge::kSum);
    v("deadline_failovers", &T::deadline_failovers, Merge::kSum);
    v("mixed_numerics", &T::mixed_numerics, Merge::kSum);
  }
};

struct Stats : TimingStats, DraftStats, TargetStats, LinkStats, PredraftStats, FaultStats {
  // Each part in turn: f(name, part), e.g. f("timing", static_cast<TimingStats&>(s)).
  template <class S, class F>
  static void parts(S& s, F&& f) {
    f("timing", static_cast<std::conditional_t<std::is_const_v<S>, const TimingStats, TimingStats>&>(s));
    f("drafting", static_cast<std::conditional_t<std::is_const_v<S>, const DraftStats, DraftStats>&>(s));
    f("target", static_cast<std::conditional_t<std::is_const_v<S>, const TargetStats, TargetStats>&>(s));
    f("link", static_cast<std::conditional_t<std::is_const_v<S>, const LinkStats, LinkStats>&>(s));
    f("predraft", static_cast<std::conditional_t<std::is_const_v<S>, const PredraftStats, PredraftStats>&>(s));
    f("faults", static_cast<std::conditional_t<std::is_const_v<S>, const FaultStats, FaultStats>&>(s));
  }
  // Adds a generation (Merge), then derive().
  Stats& operator+=(const Stats& other);
  // Recomputes every Merge::kDerived field from the sums.
  void derive();
};

}  // namespace splitspec

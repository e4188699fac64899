#pragma once
// The one interface every drafting technique implements, in the spirit of
// llama.cpp's common/speculative.h: begin a generation, propose a token tree
// for each round, accept the round's outcome. The round loop
// (client/round_loop.h) runs any drafter against any verifier, local or on a
// server, so a technique never knows where its tree is verified.
//
// Exactness is the verifier's business, not the drafter's, given two rules:
// - Under sampling, a node drawn from a distribution carries that q (the one
//   really sampled from, after every filter); a node chosen any other way
//   carries none and is verified as one-hot. Either is exact.
// - A node's token may depend on anything but the verifier's random draws.
//
// Forking (pre-drafting): fork() copies the drafter's state; the copy
// accepts a predicted verdict and proposes the round after it on a worker
// thread. When the real verdict matches, the main drafter takes the copy's
// state with swap_state(): its counters stay its own.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/decoding/sampling.h"
#include "common/decoding/token_tree.h"
#include "common/decoding/verify.h"
#include "common/drafting/drafter_counts.h"
#include "common/drafting/speculative_params.h"

namespace splitspec {

// One generation's settings, as far as drafting is concerned: the request's
// SpeculativeParams as given, its sampling, and the device's emulation.
struct DraftParams : SpeculativeParams {
  SamplingParams sampling;  // greedy: choose greedily; else draw, reporting q
  // Emulated slower device: begin, propose and accept each take this many
  // times their measured time (ClientOptions::emulate_draft_factor).
  double slowdown = 1;
};

// A drafter's seed for a generation seeded `seed`: its draws stay independent
// of the verifier's accept/reject draws.
inline uint64_t draft_seed(uint64_t seed) { return seed ^ 0x9e3779b97f4a7c15ull; }

// What the verifier made of a round.
struct RoundOutcome {
  const DraftTree& tree;        // what was verified (maybe less than proposed)
  const Verdict& verdict;       // accepted path, then the tokens to append
  const VerdictExtras& extras;  // what wants() asked for; predicted verdicts: an exit's hidden state at most
};

// The counts Stats shows (DrafterCounts), and the ones only drafting reads.
struct DrafterStats : DrafterCounts {
  int64_t rounds = 0;
  int64_t nodes = 0;           // tree nodes verified
  int64_t accepted_nodes = 0;  // of those, accepted
  double prefill_ms = 0;       // begin()
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // What the verifier should send along with each verdict.
  virtual ExtrasRequest wants() const { return {}; }

  // Starts a generation on `prompt` (at least one token).
  void begin(const std::vector<int32_t>& prompt, const DraftParams& params);
  // The next round's tree, at most `budget` nodes (0: an empty tree, which
  // verification turns into one plain decoding step). `stop`, checked between
  // draft steps, cuts a pre-draft short; a cut tree is thrown away.
  DraftTree propose(int32_t budget, const std::function<bool()>& stop = {});
  // Counts the round, then learns from it and commits its tokens.
  void accept(const RoundOutcome& outcome);
  // Counts the round only: for a drafter about to take a forked state that
  // has accepted it already.
  void record(const RoundOutcome& outcome);

  // Work while the round is verified: between verifying() and verified() the
  // drafter may work on another thread, drafting while `spare_compute` says
  // the device has compute to spare (EdgeLLM's provisional generation) or
  // doing bookkeeping the next proposal does not need (DIAA's table
  // updates). The default does nothing.
  virtual void verifying(const std::function<bool()>& spare_compute) {}
  virtual void verified() {}

  // A copy of this drafter's state with counters of its own; only for
  // techniques that can fork.
  virtual bool can_fork() const { return false; }
  virtual std::unique_ptr<Drafter> fork() const;
  // Makes this drafter (a fork of the same technique) `other`'s state again,
  // reusing its memory: a worker re-forks every round without allocating.
  void assign_state(const Drafter& other);
  // Exchanges state, not counters, with a fork.
  void swap_state(Drafter& other);

  // Memory the drafter holds for its state (KV caches, tables, trees); the
  // weights of a shared draft model are not counted.
  virtual size_t memory_bytes() const = 0;
  const DrafterStats& stats() const { return stats_; }

 protected:
  virtual void on_begin(const std::vector<int32_t>& prompt) = 0;
  virtual DraftTree on_propose(int32_t budget, const std::function<bool()>& stop) = 0;
  virtual void on_accept(const RoundOutcome& outcome) = 0;
  // Forking techniques override both.
  virtual void on_assign(const Drafter& other);
  virtual void on_swap(Drafter& other);

  const DraftParams& params() const { return params_; }
  // Sleeps off the rest of params().slowdown x the time since t0 (an
  // emulated slower device), sooner if `stop` says so.
  void emulate_slowdown(std::chrono::steady_clock::time_point t0, const std::function<bool()>& stop = {}) const;
  Rng& rng() { return rng_; }
  // Techniques add draft forwards, background drafting time and their own counters.
  DrafterStats stats_;

 private:
  DraftParams params_;
  // Committed tokens: each proposal draws from Rng::keyed(its seed, this), so
  // a pre-draft and the round it stands for draw alike, and a generation
  // resumed elsewhere drafts what it would have.
  int64_t position_ = 0;
  Rng rng_{0};
};

}  // namespace splitspec

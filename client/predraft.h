#pragma once
// Pre-drafting (the early-exit edge-cloud paper, Algorithm 1): while the
// server verifies a round, worker threads take the early verdicts it streams,
// most promising first, and draft the next round as if each were the final
// verdict, into a pre-draft cache keyed by the verdict. When the final
// verdict arrives, a cached (or still running) pre-draft for exactly that
// verdict is the next draft: no drafting delay. Any drafter that can fork
// (Drafter::fork) pre-drafts: a worker forks the main drafter, accepts the
// predicted verdict and proposes.
//
// Exactness does not depend on any of this: a pre-draft for verdict V is
// what the drafter proposes after accepting V, with fresh randomness, exactly
// what drafting after the final verdict V would have done.
#include <atomic>
#include <condition_variable>
#include <exception>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <thread>
#include <utility>
#include <vector>

#include "client/client_stats.h"
#include "client/verifier.h"
#include "common/drafting/drafter.h"

namespace splitspec {

enum class QueuePolicy { kPriority, kFifo, kRandom };
// "priority", "fifo", "random"; throws splitspec::Error otherwise.
QueuePolicy parse_queue_policy(const std::string& name);


class PreDrafter {
 public:
  // `workers` threads, each drafting on a fork of its own. `budget(length)`:
  // the most nodes a round may carry after `length` committed tokens.
  PreDrafter(int workers, QueuePolicy policy, std::function<int32_t(int64_t)> budget, uint64_t seed);
  ~PreDrafter();

  // Round `round` was sent: `main` holds its state after proposing `tree`
  // and stays untouched until take(); `length` tokens are committed.
  // Clears the queue and the cache.
  void begin_round(uint32_t round, const Drafter& main, const DraftTree& tree, int64_t length);
  // From the verifier: an early verdict (ignored if stale).
  void push(const PredictedVerdict& v);
  // The final verdict of the current round. On a hit, `main` counts the
  // round and takes the pre-drafted state (as if it had accepted the round
  // and proposed again), and the draft is returned; on a miss nothing
  // changes and other work is stopped. Rethrows what failed in a worker.
  std::optional<DraftTree> take(const RoundOutcome& outcome, Drafter& main);
  // Stops all work (end of generation); afterwards no worker touches the
  // drafter given to begin_round.
  void stop();
  // Lets the caller change the round's `main` before take(): no early
  // verdict is taken any more and, once this returns, no worker reads
  // `main` again this round (forks already made go on). The round loop
  // calls it when the drafter's own provisional worker is about to write
  // `main` (spare compute on a fallback). Cheap after the first call.
  void release_main();

  PredraftStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  // A verdict's identity: what it appends and through which nodes.
  using Key = std::pair<std::vector<int32_t>, std::vector<int32_t>>;
  struct Job {
    Verdict verdict;
    double confidence;
    int32_t exit_layer;
    uint64_t arrival;
    VerdictExtras extras;  // the exit's hidden state, where sent
  };
  struct Entry {
    bool done = false;
    size_t slot = 0;  // the fork holding this pre-draft's state
    int32_t exit_layer = 0;
    DraftTree tree;
  };
  static Key key_of(const Verdict& v) { return {v.tokens, v.path}; }
  void run(int worker);
  bool pop(Job& job);    // under mu_
  size_t take_slot();    // under mu_
  void clear_round();    // under mu_

  const QueuePolicy policy_;
  const std::function<int32_t(int64_t)> budget_;
  // Forks: a running pre-draft owns one, a finished one keeps it until the
  // round ends, so a worker can move on without losing it. Null until first
  // used; a fork never moves once made.
  std::vector<std::unique_ptr<Drafter>> slots_;
  std::vector<size_t> free_slots_;
  std::vector<std::thread> threads_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // work queued, or shutting down
  std::condition_variable done_cv_;  // an entry finished
  std::vector<Job> queue_;
  std::map<Key, Entry> cache_;
  uint32_t round_ = 0;
  int64_t length_ = 0;  // committed tokens when the round was sent
  std::shared_ptr<const DraftTree> tree_;  // the round's tree (tokens and parents)
  uint64_t epoch_ = 0;  // bumped when a round's verdict is final: stale work stops
  std::optional<Key> winner_;  // the final verdict: that job keeps running
  bool stopping_ = false;
  bool accepting_ = false;  // between begin_round and take: early verdicts are welcome
  uint64_t arrivals_ = 0;
  std::mt19937_64 pick_;
  std::exception_ptr error_;  // the first failure of a worker, for take()
  // Workers fork from main_ under main_mu_ shared, and only for jobs of
  // main_round_: a job popped before the round changed must not fork the
  // next round's state.
  const Drafter* main_ = nullptr;
  uint32_t main_round_ = 0;
  std::shared_mutex main_mu_;
  std::atomic<bool> released_{false};  // release_main() ran this round
  PredraftStats stats_;
};

}  // namespace splitspec

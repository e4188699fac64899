#pragma once
// Pre-drafting (the early-exit edge-cloud paper, Algorithm 1): while the server verifies a round,
// worker threads take the early verdicts it streams, most promising first,
// and draft the next round as if each were the final verdict, into a
// pre-draft cache keyed by the verdict's tokens. When the final verdict
// arrives, a cached (or still running) pre-draft for exactly its tokens is
// the next draft: no drafting delay.
//
// Exactness does not depend on any of this: a pre-draft for tokens T is drawn
// from the draft model given prefix + T with fresh randomness, exactly what
// drafting after the final verdict T would have done.
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "common/drafting/model_drafter.h"

namespace splitspec {

enum class QueuePolicy { kPriority, kFifo, kRandom };
// "priority", "fifo", "random"; throws splitspec::Error otherwise.
QueuePolicy parse_queue_policy(const std::string& name);

struct PredraftStats {
  int64_t rounds = 0;          // final verdicts looked up
  int64_t hits = 0;            // found done or running
  int64_t waited_hits = 0;     // of those, still running (waited T_r)
  int64_t early_verdicts = 0;  // received for live rounds
  int64_t predrafts = 0;       // started
  int64_t exit_layer_sum = 0;  // over hits: the exit that predicted them
  double wait_ms = 0;          // T_r summed over waited hits
  double predraft_ms = 0;      // worker drafting time
};

class PreDrafter {
 public:
  // `workers` threads, each with its own draft KV cache.
  PreDrafter(const Model& draft, int workers, QueuePolicy policy, int32_t gamma, const SamplingParams& params,
             uint64_t seed);
  ~PreDrafter();

  // A round was sent: `main` holds its drafts and stays untouched until
  // take(); pre-drafts fork from it. Clears the queue and the cache.
  void begin_round(uint32_t round, const ModelDrafter& main);
  // From the receiver: an early verdict of `round` (ignored if stale).
  void push(uint32_t round, std::vector<int32_t> tokens, int32_t accepted, double confidence, int32_t exit_layer);
  // The final verdict of the current round. On a hit, `main` takes the
  // pre-drafted state (as if accept(tokens, accepted) then draft()) and the
  // draft is returned; on a miss nothing changes and other work is stopped.
  std::optional<DraftTree> take(const std::vector<int32_t>& tokens, int32_t accepted, ModelDrafter& main);
  // Stops all work (end of generation); afterwards no worker touches the
  // drafter given to begin_round.
  void stop();

  PredraftStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  struct Job {
    std::vector<int32_t> tokens;
    int32_t accepted;
    double confidence;
    int32_t exit_layer;
    uint64_t arrival;
  };
  struct Entry {
    bool done = false;
    size_t slot = 0;  // the drafter holding this pre-draft's state
    int32_t exit_layer = 0;
    DraftTree tree;
  };
  void run(int worker);
  bool pop(Job& job);    // under mu_
  size_t take_slot();    // under mu_
  void clear_round();    // under mu_

  const Model& draft_;
  const QueuePolicy policy_;
  const int32_t gamma_;
  const SamplingParams params_;
  const uint64_t seed_;
  // Drafter states: a running pre-draft owns one, a finished one keeps it
  // until the round ends, so a worker can move on without losing it.
  std::vector<std::unique_ptr<ModelDrafter>> slots_;
  std::vector<size_t> free_slots_;
  std::vector<std::thread> threads_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // work queued, or shutting down
  std::condition_variable done_cv_;  // an entry finished
  std::vector<Job> queue_;
  std::map<std::vector<int32_t>, Entry> cache_;
  uint32_t round_ = 0;
  uint64_t epoch_ = 0;  // bumped when a round's verdict is final: stale work stops
  std::vector<int32_t> winner_;  // the final verdict's tokens: that job keeps running
  bool stopping_ = false;
  bool accepting_ = false;  // between begin_round and take: early verdicts are welcome
  uint64_t arrivals_ = 0;
  std::mt19937_64 pick_;
  const ModelDrafter* main_ = nullptr;
  std::shared_mutex main_mu_;  // workers read main_ while forking; take() writes it
  PredraftStats stats_;
};

}  // namespace splitspec

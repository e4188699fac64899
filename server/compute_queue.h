#pragma once
// The server's compute worker: target forwards run here, never on gRPC's
// callback threads (which must not block). Jobs are FIFO. Rounds (a
// session's draft, or one step of a cloud-ar stream) that are waiting
// together run as one batched target forward (TargetDecoder::verify_batch),
// up to a row budget, optionally after a short wait for a fuller batch, like
// Triton's dynamic batcher's max_queue_delay. A round whose prompt does not
// fit the row budget has its prefill cut into chunks that fill the batches
// (chunked prefill, as vLLM's), going back to the queue's end after each, so
// one long prompt never holds every other session's round for its whole
// prefill. Each session's verdict is
// bitwise what it would be alone: the kernels are batch-invariant and every
// session keeps its own KV cache, so nothing is copied between sessions.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/decoding/target_decoder.h"
#include "common/util/stopwatch.h"

#include <prometheus/histogram.h>

namespace splitspec {

struct BatchingOptions {
  bool enabled = true;
  int32_t max_rows = 64;  // rows of one batched forward; a larger prefill runs in chunks
  double wait_ms = 0;     // how long the first waiting round may wait for others
};

// What became of a round.
struct RoundVerified {
  std::optional<RoundResult> result;  // unset when skipped or failed
  bool skipped = false;               // its stream no longer wanted it
  bool invalid = false;               // the error is the client's (splitspec::Error), else internal
  std::string error;
  double queue_ms = 0;      // posted to its forward's start
  int32_t batch_rounds = 0; // rounds in its forward
  int32_t batch_rows = 0;   // rows in its forward
};

struct RoundJob {
  TargetDecoder* decoder;  // untouched by anyone else until `done` runs
  // Shared, so that a tap of the round's forward can read it too.
  std::shared_ptr<const DraftTree> tree = std::make_shared<const DraftTree>();
  TargetDecoder::RoundRequest request;
  // Checked when the batch forms: false skips the round (its stream ended).
  std::function<bool()> wanted;
  // Runs on the worker once the round is decided.
  std::function<void(RoundVerified)> done;
  SteadyClock::time_point queued = SteadyClock::now();
};

// What the worker has done, for /metrics.
struct ComputeStats {
  using Bounds = prometheus::Histogram::BucketBoundaries;
  prometheus::Histogram batch_rounds{Bounds{1, 2, 4, 8, 16, 32, 64}};
  prometheus::Histogram batch_rows{Bounds{1, 4, 8, 16, 32, 64, 128, 256, 512}};
  prometheus::Histogram queue_ms{Bounds{0.1, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}};
  // One batch: its forward, then each round's verification.
  prometheus::Histogram forward_ms{Bounds{0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}};
  // Posted to verdict: queue, forward and verification.
  prometheus::Histogram round_ms{Bounds{0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}};
  std::atomic<int64_t> prefill_chunks{0};
};

class ComputeQueue {
 public:
  // `compute_threads` is the worker's LibTorch/OpenMP thread count.
  // `emulation` pads every forward to its modeled time (forward_emulation.h).
  explicit ComputeQueue(int compute_threads, BatchingOptions batching = {}, ForwardEmulation emulation = {});
  // Runs every job still queued, then stops the worker.
  ~ComputeQueue();
  // A job that runs alone, in its turn.
  void post(std::function<void()> job);
  void post_round(RoundJob job);
  // Rounds queued and not yet in a forward.
  int32_t waiting_rounds() const;
  const ComputeStats& stats() const { return stats_; }
  const BatchingOptions& batching() const { return batching_; }

 private:
  struct Job {
    std::function<void()> task;   // set for a plain job
    std::optional<RoundJob> round;  // set for a round
  };
  void run(int compute_threads);
  // A round whose forward this time is only a chunk of its prefill.
  struct Chunk {
    RoundJob job;
    int64_t tokens;
  };
  // Takes the next batch from the queue's front (mu_ held): whole rounds,
  // and prefill chunks of rounds too large for what the budget has left.
  void take_rounds(std::vector<RoundJob>& rounds, std::vector<Chunk>& chunks);
  void run_rounds(std::vector<RoundJob> jobs, std::vector<Chunk> chunks);

  const BatchingOptions batching_;
  const ForwardEmulation emulation_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  int32_t waiting_rounds_ = 0;
  bool stopping_ = false;
  ComputeStats stats_;
  std::thread worker_;
};

}  // namespace splitspec

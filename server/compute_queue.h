#pragma once
// The server's compute worker: target forwards run here, one job at a time,
// never on gRPC's callback threads (which must not block). Jobs are rounds
// and autoregressive steps, queued FIFO, so concurrent sessions interleave
// round by round.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace splitspec {

class ComputeQueue {
 public:
  // `compute_threads` is the worker's LibTorch/OpenMP thread count.
  explicit ComputeQueue(int compute_threads);
  // Runs every job still queued, then stops the worker.
  ~ComputeQueue();
  void post(std::function<void()> job);

 private:
  void run(int compute_threads);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace splitspec

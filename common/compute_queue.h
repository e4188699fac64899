#pragma once
// A compute worker: one thread running jobs one at a time, FIFO, never on
// gRPC's callback threads (which must not block). The server runs its target
// forwards on one (rounds and autoregressive steps, so concurrent sessions
// interleave round by round) and its early exits on another.
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

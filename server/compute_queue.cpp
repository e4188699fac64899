#include "server/compute_queue.h"

#include <c10/core/InferenceMode.h>

#include "common/engine/threads.h"

namespace splitspec {

ComputeQueue::ComputeQueue(int compute_threads) : worker_([this, compute_threads] { run(compute_threads); }) {}

ComputeQueue::~ComputeQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void ComputeQueue::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void ComputeQueue::run(int compute_threads) {
  // OpenMP's thread count is per calling thread: set it where forwards run.
  set_compute_threads(compute_threads);
  c10::InferenceMode guard;
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();  // jobs report their own errors on their stream
  }
}

}  // namespace splitspec

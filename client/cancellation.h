#pragma once
// Client::cancel() reaching a generation on another thread: a flag the loop
// checks at round boundaries, and an interrupt for a wait in progress (a
// round on the server), so that a generation ends within one round.
#include <atomic>
#include <functional>
#include <mutex>

namespace splitspec {

class Cancellation {
 public:
  // Any thread.
  void request() {
    std::lock_guard<std::mutex> lock(mu_);
    requested_ = true;
    if (interrupt_) interrupt_();
  }
  bool requested() const { return requested_; }
  // A new generation.
  void reset() { requested_ = false; }
  // While set, request() also runs `f` (under a lock, so `f` may touch
  // what clear_interrupt() guards); runs it at once if already requested.
  void set_interrupt(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(mu_);
    interrupt_ = std::move(f);
    if (requested_ && interrupt_) interrupt_();
  }
  void clear_interrupt() {
    std::lock_guard<std::mutex> lock(mu_);
    interrupt_ = nullptr;
  }

 private:
  std::mutex mu_;
  std::atomic<bool> requested_{false};
  std::function<void()> interrupt_;
};

}  // namespace splitspec

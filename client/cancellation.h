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
  // While a Scope lives, request() also runs its `interrupt` (under the lock,
  // so the scope's end waits for a run in progress); it runs at once if a
  // cancel came first. A scope, so that an exception cannot leave an
  // interrupt behind that reaches into a finished call.
  class Scope {
   public:
    Scope(Cancellation* c, std::function<void()> interrupt) : c_(c) {
      if (c_) c_->set_interrupt(std::move(interrupt));
    }
    ~Scope() {
      if (c_) c_->set_interrupt(nullptr);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Cancellation* c_;
  };

 private:
  void set_interrupt(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(mu_);
    interrupt_ = std::move(f);
    if (requested_ && interrupt_) interrupt_();
  }

  std::mutex mu_;
  std::atomic<bool> requested_{false};
  std::function<void()> interrupt_;
};

}  // namespace splitspec

#include "client/reconnector.h"

#include <algorithm>
#include <thread>

namespace splitspec {

void Reconnector::start(std::chrono::milliseconds window, Clock::time_point deadline) {
  window_ = window;
  deadline_ = deadline;
  answered();
}

void Reconnector::answered() {
  broke_.reset();
  reconnects_ = 0;
  backoff_ = std::chrono::milliseconds(20);
}

bool Reconnector::broke() {
  if (broke_) return false;
  broke_ = Clock::now();
  return true;
}

bool Reconnector::reconnect(bool refused_ends, const std::function<bool()>& stop) {
  if (!broke_) broke();
  const auto until = std::min(*broke_ + window_, deadline_);
  if (reconnects_ > 0) {
    // Back, then broken again: wait a little before calling it once more,
    // in slices so that `stop` is seen.
    const auto wake = std::min(Clock::now() + backoff_, until);
    while (Clock::now() < wake && !(stop && stop())) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(1000));
  }
  if (Clock::now() >= until || (stop && stop()) || !link_.wait_connected(until, refused_ends, stop) || (stop && stop()))
    return false;
  reconnects_ += 1;
  return true;
}

}  // namespace splitspec

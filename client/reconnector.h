#pragma once
// How a client calls a broken server again, one policy for both roads that
// can break: Session rounds (ResilientVerifier) and cloud-ar's Generate
// stream (stream_generate). A break opens a window (the caller's reconnect
// budget, never past the generation's deadline) that counts from the first
// break since the server last answered; a server that comes back and breaks
// again within it is waited for after a backoff (20 ms, doubling to 1 s), so
// a server in a crash loop is not hammered. What answers is the caller's to
// check (ServerLink::check_same_target).
#include <chrono>
#include <functional>
#include <optional>

#include "client/server_link.h"

namespace splitspec {

class Reconnector {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Reconnector(ServerLink& link) : link_(link) {}

  // A new generation: no window open, `window` long from each first break.
  void start(std::chrono::milliseconds window, Clock::time_point deadline);
  // The server answered: the next break opens a new window.
  void answered();
  // A break, now; true if it is the first since the server answered.
  bool broke();
  // When the open window began (the first break), if one is open.
  std::optional<Clock::time_point> since() const { return broke_; }
  // After a break: backs off if the server broke again since it came back,
  // then waits until it accepts connections. True if it does within the
  // window; false once the window closes, `stop` holds, or, with
  // `refused_ends`, the server refuses connections.
  bool reconnect(bool refused_ends, const std::function<bool()>& stop);

 private:
  ServerLink& link_;
  std::chrono::milliseconds window_{0};
  Clock::time_point deadline_ = Clock::time_point::max();
  std::optional<Clock::time_point> broke_;
  int reconnects_ = 0;  // in the open window
  std::chrono::milliseconds backoff_{20};
};

}  // namespace splitspec

#pragma once
// Failed bearer tokens by peer, so that tokens cannot be guessed at the
// speed of the network. A peer's first few failures in a minute cost
// nothing (a mistyped token); after that each failure holds its refusal for
// a delay that doubles up to a cap, and while that delay runs the peer's
// other requests are told to retry later (429 and Retry-After) without their
// token being looked at. Nothing is locked out: the delay ends, and a
// minute without failures forgets the peer.
#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace splitspec {

class FailedTokens {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kFree = 5;
  static constexpr std::chrono::milliseconds kFirstDelay{250};
  static constexpr std::chrono::milliseconds kMaxDelay{30000};
  static constexpr std::chrono::seconds kForget{60};

  // How long `peer` must still wait before a token of its is checked; zero: now.
  std::chrono::milliseconds wait(const std::string& peer, Clock::time_point now = Clock::now());
  // Records a refused token; returns how long its refusal is held.
  std::chrono::milliseconds failed(const std::string& peer, Clock::time_point now = Clock::now());

  // The key of a request: the socket's peer, or, when that peer is one of
  // `trusted` proxies, the address the proxies say they forwarded for (the
  // rightmost X-Forwarded-For entry that is not itself a trusted proxy).
  static std::string key(const std::string& peer, const std::string& forwarded_for,
                         const std::vector<std::string>& trusted);

 private:
  struct Peer {
    int failures = 0;
    Clock::time_point last;
    Clock::time_point until;
  };
  std::mutex mu_;
  std::unordered_map<std::string, Peer> peers_;
};

}  // namespace splitspec

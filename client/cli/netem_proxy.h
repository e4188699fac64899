#pragma once
// A TCP proxy that imposes a one-way delay, jitter and a rate limit on each
// direction, over real sockets: experiments put it between client and server
// to stand in for Wi-Fi or a WAN, the way Linux netem would without needing
// root. Byte order is preserved (it is TCP); each chunk read is released
// `delay` (+ jitter) after it finished serialising at the configured rate.
// A lost packet is what TCP makes of it: its chunk arrives one
// retransmission timeout late, and everything behind it waits for it
// (head-of-line blocking). No byte is ever dropped.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace splitspec {

struct NetemOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0 picks a free one
  std::string upstream;                // HOST:PORT
  double delay_ms = 0;                 // one way, each direction
  double jitter_ms = 0;                // spread of the delay, by `jitter_distribution`; never below zero delay
  // "uniform": in [-jitter, +jitter]; "normal": a standard deviation of
  // jitter; "pareto": only ever later, a heavy tail (shape 3, mean
  // jitter / 2), as queues in a congested radio link make it.
  std::string jitter_distribution = "uniform";
  double rate_kbps = 0;                // per direction; 0: unlimited
  // Each packet (1448-byte TCP segment) of a chunk is lost with this
  // probability; a chunk with a lost packet arrives `rto_ms` late.
  double loss = 0;
  double rto_ms = 200;  // Linux's minimum retransmission timeout
  uint64_t seed = 1;
};

// Named links (docs/edge-cloud.md gives each figure's source): wifi, lte,
// 5g, satellite. Sets delay, jitter and its distribution, loss and rate;
// throws splitspec::Error naming the profiles for an unknown name.
void apply_link_profile(const std::string& name, NetemOptions& options);
// The names, for flag checks, and joined for help text ("wifi, lte, 5g, satellite").
std::vector<std::string> link_profiles();
std::string link_profile_names();
// What NetemOptions::jitter_distribution takes.
const std::vector<std::string>& jitter_distributions();

class NetemProxy {
 public:
  // Binds the listening socket; throws splitspec::Error on bad options or
  // when the address cannot be bound.
  explicit NetemProxy(NetemOptions options);
  // Stops and joins everything.
  ~NetemProxy();

  int port() const { return port_; }
  // Accepts connections on a background thread until stop().
  void start();
  // Closes the listener and every proxied connection.
  void stop();
  int64_t connections() const { return connections_.load(); }
  // Chunks held back a retransmission timeout, both directions.
  int64_t retransmissions() const { return retransmissions_.load(); }

 private:
  struct Connection;
  void accept_loop();

  NetemOptions options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> connections_{0};
  std::atomic<int64_t> retransmissions_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Connection>> live_;
};

}  // namespace splitspec

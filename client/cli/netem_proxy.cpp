#include "client/cli/netem_proxy.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <random>

#include "common/util/error.h"
#include "common/util/host_port.h"

namespace splitspec {

namespace {

using Clock = std::chrono::steady_clock;

addrinfo* resolve(const std::string& address, const char* what, bool passive) {
  const auto [host, port_number] = split_host_port(address, what);
  const std::string port = std::to_string(port_number);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) throw Error(std::string(what) + " " + address + ": " + gai_strerror(rc));
  return res;
}

void no_delay(int fd) {
  // Nagle would add its own delay on top of the emulated one.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

// One proxied TCP connection: per direction, a reader stamps each chunk with
// its release time and a writer releases it then. A chunk already due, with
// nothing ahead of it, the reader passes on itself: handing it to the writer
// would add a thread wake-up to every message of a zero-delay link, which on
// a loaded machine costs more than the link is meant to.
struct NetemProxy::Connection {
  struct Chunk {
    Clock::time_point release;
    std::string bytes;  // empty: end of stream
  };
  struct Direction {
    int from = -1, to = -1;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Chunk> queue;
    bool writing = false;  // a chunk is being written, by either thread
    Clock::time_point link_free{}, last_release{};
    std::mt19937_64 rng;
    std::thread reader, writer;
  };

  Connection(int client_fd, int upstream_fd, const NetemOptions& o, uint64_t seed, std::atomic<int64_t>* lost)
      : client(client_fd), upstream(upstream_fd), options(o), retransmissions(lost) {
    up.from = client;
    up.to = upstream;
    up.rng.seed(seed);
    down.from = upstream;
    down.to = client;
    down.rng.seed(seed + 1);
  }

  void start() {
    for (Direction* d : {&up, &down}) {
      d->reader = std::thread([this, d] { read_loop(*d); });
      d->writer = std::thread([this, d] { write_loop(*d); });
    }
  }

  void close_all() {
    closing = true;
    shutdown(client, SHUT_RDWR);
    shutdown(upstream, SHUT_RDWR);
    for (Direction* d : {&up, &down}) {
      std::lock_guard<std::mutex> lock(d->mu);
      d->cv.notify_all();
    }
  }

  void join() {
    for (Direction* d : {&up, &down}) {
      if (d->reader.joinable()) d->reader.join();
      if (d->writer.joinable()) d->writer.join();
    }
    close(client);
    close(upstream);
  }

  bool finished() {
    return done_directions.load() == 2;
  }

  void read_loop(Direction& d) {
    std::vector<char> buf(64 * 1024);
    while (true) {
      const ssize_t n = recv(d.from, buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      const auto now = Clock::now();
      Chunk c;
      bool direct;
      c.bytes.assign(buf.data(), n > 0 ? static_cast<size_t>(n) : 0);
      {
        std::lock_guard<std::mutex> lock(d.mu);
        auto ready = now;
        if (n > 0 && options.rate_kbps > 0) {
          // Serialisation at the link rate, behind whatever is still on the link.
          const auto start = std::max(now, d.link_free);
          d.link_free = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(static_cast<double>(n) * 8.0 / (options.rate_kbps * 1000.0)));
          ready = d.link_free;
        }
        double delay = options.delay_ms;
        if (options.jitter_ms > 0) {
          if (options.jitter_distribution == "normal") {
            delay += std::normal_distribution<double>(0, options.jitter_ms)(d.rng);
          } else if (options.jitter_distribution == "pareto") {
            // Pareto of shape 3 and scale 1, less its minimum: mean 1/2.
            const double u = std::uniform_real_distribution<double>(0, 1)(d.rng);
            delay += options.jitter_ms * (std::pow(1.0 - u, -1.0 / 3.0) - 1.0);
          } else {
            delay += std::uniform_real_distribution<double>(-options.jitter_ms, options.jitter_ms)(d.rng);
          }
        }
        if (n > 0 && options.loss > 0) {
          const double segments = std::ceil(static_cast<double>(n) / 1448.0);
          if (std::uniform_real_distribution<double>(0, 1)(d.rng) < 1.0 - std::pow(1.0 - options.loss, segments)) {
            delay += options.rto_ms;
            *retransmissions += 1;
          }
        }
        c.release = ready + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(std::max(0.0, delay)));
        // TCP delivers in order: jitter never lets a chunk overtake another.
        c.release = std::max(c.release, d.last_release);
        d.last_release = c.release;
        direct = n > 0 && d.queue.empty() && !d.writing && c.release <= Clock::now();
        if (direct)
          d.writing = true;
        else
          d.queue.push_back(std::move(c));
      }
      if (direct) {
        if (!pass_on(d, c)) return;
        continue;
      }
      d.cv.notify_all();
      if (n <= 0) return;
    }
  }

  void write_loop(Direction& d) {
    while (true) {
      Chunk c;
      {
        std::unique_lock<std::mutex> lock(d.mu);
        d.cv.wait(lock, [&] { return closing.load() || !d.queue.empty(); });
        if (closing) break;
        const auto release = d.queue.front().release;
        if (d.cv.wait_until(lock, release, [&] { return closing.load(); })) break;
        c = std::move(d.queue.front());
        d.queue.pop_front();
        d.writing = true;
      }
      if (c.bytes.empty()) {
        shutdown(d.to, SHUT_WR);  // pass the half-close on
        break;
      }
      if (!pass_on(d, c)) break;
    }
    if (++done_directions == 2) close_all();
  }

  // Writes a chunk claimed with `writing`; on a dead peer closes everything.
  bool pass_on(Direction& d, const Chunk& c) {
    const bool ok = write_all(d.to, c.bytes.data(), c.bytes.size());
    {
      std::lock_guard<std::mutex> lock(d.mu);
      d.writing = false;
    }
    if (!ok) close_all();
    return ok;
  }

  int client, upstream;
  NetemOptions options;
  std::atomic<int64_t>* retransmissions;  // the proxy's count
  Direction up, down;
  std::atomic<bool> closing{false};
  std::atomic<int> done_directions{0};
};

namespace {

struct LinkProfile {
  const char* name;
  double delay_ms, jitter_ms;
  const char* distribution;
  double loss, rate_kbps;
};
// One way; sources and reasoning in docs/edge-cloud.md ("Link profiles").
constexpr LinkProfile kProfiles[] = {
    {"wifi", 3, 2, "normal", 0.001, 200000},
    {"lte", 25, 8, "pareto", 0.002, 20000},
    {"5g", 10, 3, "pareto", 0.001, 100000},
    {"satellite", 25, 5, "normal", 0.01, 20000},
};

}  // namespace

void apply_link_profile(const std::string& name, NetemOptions& o) {
  for (const LinkProfile& p : kProfiles)
    if (name == p.name) {
      o.delay_ms = p.delay_ms;
      o.jitter_ms = p.jitter_ms;
      o.jitter_distribution = p.distribution;
      o.loss = p.loss;
      o.rate_kbps = p.rate_kbps;
      return;
    }
  throw Error("netem: no link profile '" + name + "'; there are " + link_profile_names());
}

std::vector<std::string> link_profiles() {
  std::vector<std::string> names;
  for (const LinkProfile& p : kProfiles) names.emplace_back(p.name);
  return names;
}

std::string link_profile_names() {
  std::string names;
  for (const std::string& p : link_profiles()) names += (names.empty() ? "" : ", ") + p;
  return names;
}

const std::vector<std::string>& jitter_distributions() {
  static const std::vector<std::string> names = {"uniform", "normal", "pareto"};
  return names;
}

NetemProxy::NetemProxy(NetemOptions options) : options_(std::move(options)) {
  if (options_.delay_ms < 0 || options_.jitter_ms < 0 || options_.rate_kbps < 0 || options_.rto_ms < 0)
    throw Error("netem: delay, jitter, rate and rto must be >= 0");
  if (!(options_.loss >= 0 && options_.loss < 1)) throw Error("netem: loss must be a probability in [0, 1)");
  const std::vector<std::string>& distributions = jitter_distributions();
  if (std::find(distributions.begin(), distributions.end(), options_.jitter_distribution) == distributions.end())
    throw Error("netem: jitter distribution must be uniform, normal or pareto, not '" + options_.jitter_distribution + "'");
  addrinfo* up = resolve(options_.upstream, "upstream", false);  // fail early on a bad upstream
  freeaddrinfo(up);
  addrinfo* res = resolve(options_.listen, "listen", true);
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0) {
      listen_fd_ = fd;
      break;
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0) throw Error("netem: cannot listen on " + options_.listen + ": " + std::strerror(errno));
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

NetemProxy::~NetemProxy() { stop(); }

void NetemProxy::start() { acceptor_ = std::thread([this] { accept_loop(); }); }

void NetemProxy::stop() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    live.swap(live_);
  }
  for (auto& c : live) c->close_all();
  for (auto& c : live) c->join();
}

void NetemProxy::accept_loop() {
  uint64_t n = 0;
  while (!stopping_) {
    const int client = accept(listen_fd_, nullptr, nullptr);
    if (client < 0) {
      if (errno == EINTR) continue;
      return;  // the listener was shut down
    }
    no_delay(client);
    int upstream = -1;
    addrinfo* res = nullptr;
    try {
      res = resolve(options_.upstream, "upstream", false);
    } catch (const Error&) {
    }
    for (addrinfo* a = res; a; a = a->ai_next) {
      upstream = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (upstream >= 0 && connect(upstream, a->ai_addr, a->ai_addrlen) == 0) break;
      if (upstream >= 0) close(upstream);
      upstream = -1;
    }
    if (res) freeaddrinfo(res);
    if (upstream < 0) {
      close(client);  // the peer sees the upstream as unreachable
      continue;
    }
    no_delay(upstream);
    auto conn = std::make_shared<Connection>(client, upstream, options_, options_.seed + 2 * n++, &retransmissions_);
    connections_ += 1;
    std::lock_guard<std::mutex> lock(mu_);
    // Reap finished connections so a long run does not accumulate them.
    for (auto it = live_.begin(); it != live_.end();) {
      if ((*it)->finished()) {
        (*it)->join();
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
    conn->start();
    live_.push_back(std::move(conn));
  }
}

}  // namespace splitspec

// The netem proxy over real sockets: bytes arrive intact and in order, no
// sooner than the emulated link allows, and half-closes pass through.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "client/cli/netem_proxy.h"
#include "client/client.h"
#include "common/model/model.h"
#include "common/util/error.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

// Echoes every byte back until the peer half-closes, then closes.
class EchoServer {
 public:
  EchoServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(fd_, 4);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      ssize_t n;
      while ((n = recv(c, buf, sizeof(buf), 0)) > 0) send(c, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
      close(c);
    });
  }
  ~EchoServer() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
  return fd;
}

std::string read_until_eof(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

// n letters in a repeating pattern, so a lost, doubled or reordered chunk shows.
std::string letters(int n, int stride) {
  std::string out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>('a' + (i * stride) % 26));
  return out;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Netem, BytesArriveIntactInOrderAndNoSoonerThanTheLinkAllows) {
  EchoServer echo;
  NetemOptions o;
  o.upstream = echo.address();
  o.delay_ms = 15;
  o.jitter_ms = 5;
  o.rate_kbps = 2000;
  NetemProxy proxy(o);
  proxy.start();
  const int fd = connect_to(proxy.port());
  ASSERT_GE(fd, 0);
  const std::string payload = letters(100000, 7);
  const auto t0 = std::chrono::steady_clock::now();
  std::thread writer([&] {
    send(fd, payload.data(), payload.size(), MSG_NOSIGNAL);
    shutdown(fd, SHUT_WR);  // the half-close must travel through the proxy
  });
  const std::string back = read_until_eof(fd);
  const double elapsed = ms_since(t0);
  writer.join();
  close(fd);
  EXPECT_EQ(back, payload);
  // Lower bounds only: 800 kbit each way at 2000 kbit/s is 400 ms per
  // direction (the two overlap), plus at least 2 x (15 - 5) ms of delay.
  EXPECT_GE(elapsed, 400.0 + 20.0);
  EXPECT_EQ(proxy.connections(), 1);
}

// With no delay, a due chunk goes straight out from the proxy's reader and a
// jittered one waits for its writer; mixed, they still keep TCP's order.
TEST(Netem, ZeroDelayWithJitterKeepsOrderAcrossBothWritePaths) {
  EchoServer echo;
  NetemOptions o;
  o.upstream = echo.address();
  o.jitter_ms = 1;  // half the chunks due at once, half up to 1 ms later
  NetemProxy proxy(o);
  proxy.start();
  const int fd = connect_to(proxy.port());
  ASSERT_GE(fd, 0);
  const std::string payload = letters(40000, 11);
  std::thread writer([&] {
    // Small pieces with pauses, so the proxy reads many separate chunks.
    for (size_t at = 0; at < payload.size(); at += 200) {
      send(fd, payload.data() + at, std::min<size_t>(200, payload.size() - at), MSG_NOSIGNAL);
      if (at % 2000 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    shutdown(fd, SHUT_WR);
  });
  const std::string back = read_until_eof(fd);
  writer.join();
  close(fd);
  EXPECT_EQ(back, payload);
}

TEST(Netem, RoundTripIsAtLeastTwiceTheDelay) {
  EchoServer echo;
  NetemOptions o;
  o.upstream = echo.address();
  o.delay_ms = 25;
  NetemProxy proxy(o);
  proxy.start();
  const int fd = connect_to(proxy.port());
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(send(fd, "x", 1, MSG_NOSIGNAL), 1);
    char c = 0;
    ASSERT_EQ(recv(fd, &c, 1, 0), 1);
    EXPECT_EQ(c, 'x');
    EXPECT_GE(ms_since(t0), 50.0);
  }
  close(fd);
}

// A lost packet costs its chunk a retransmission timeout and holds back
// what follows; nothing is dropped, doubled or reordered.
TEST(Netem, LossDelaysByTheRetransmissionTimeoutAndKeepsEveryByte) {
  EchoServer echo;
  NetemOptions o;
  o.upstream = echo.address();
  o.loss = 0.3;
  o.rto_ms = 40;
  o.seed = 7;
  NetemProxy proxy(o);
  proxy.start();
  const int fd = connect_to(proxy.port());
  ASSERT_GE(fd, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string sent = letters(20, 7);
  std::string got;
  for (const char c : sent) {
    ASSERT_EQ(send(fd, &c, 1, MSG_NOSIGNAL), 1);
    char back = 0;
    ASSERT_EQ(recv(fd, &back, 1, 0), 1);
    got.push_back(back);
  }
  const double elapsed = ms_since(t0);
  close(fd);
  EXPECT_EQ(got, sent);
  // 40 one-packet chunks at 30%: about 12; seeded, so never none.
  EXPECT_GT(proxy.retransmissions(), 0);
  EXPECT_LT(proxy.retransmissions(), 40);
  // One round trip at a time: each retransmission's timeout is waited out in full.
  EXPECT_GE(elapsed, 40.0 * static_cast<double>(proxy.retransmissions()));
}

// One-byte round trips through a link of `o`: each its time in ms.
std::vector<double> round_trips(NetemOptions o, int count) {
  EchoServer echo;
  o.upstream = echo.address();
  NetemProxy proxy(o);
  proxy.start();
  const int fd = connect_to(proxy.port());
  std::vector<double> out;
  for (int i = 0; i < count && fd >= 0; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    char c = 'x';
    if (send(fd, &c, 1, MSG_NOSIGNAL) != 1 || recv(fd, &c, 1, 0) != 1) break;
    out.push_back(ms_since(t0));
  }
  if (fd >= 0) close(fd);
  return out;
}

// Jitter's distributions: pareto only ever adds (and has a tail past the
// mean), normal spreads both ways around the delay.
TEST(Netem, JitterDistributionsHaveTheirShapes) {
  NetemOptions o;
  o.delay_ms = 10;
  o.jitter_ms = 6;
  o.seed = 3;
  o.jitter_distribution = "pareto";
  const std::vector<double> pareto = round_trips(o, 40);
  ASSERT_EQ(pareto.size(), 40u);
  for (double ms : pareto) EXPECT_GE(ms, 20.0) << "pareto jitter never arrives early";
  o.jitter_distribution = "normal";
  const std::vector<double> normal = round_trips(o, 40);
  ASSERT_EQ(normal.size(), 40u);
  EXPECT_LT(*std::min_element(normal.begin(), normal.end()), 20.0) << "normal jitter also arrives early";
  o.jitter_distribution = "gamma";
  EXPECT_THROW(round_trips(o, 1), Error);
}

TEST(Netem, LinkProfilesSetTheWholeLinkAndUnknownOnesAreNamed) {
  NetemOptions o;
  apply_link_profile("satellite", o);
  EXPECT_EQ(o.delay_ms, 25);
  EXPECT_GT(o.loss, 0);
  EXPECT_EQ(o.jitter_distribution, "normal");
  for (const char* name : {"wifi", "lte", "5g"}) {
    NetemOptions p;
    apply_link_profile(name, p);
    EXPECT_GT(p.delay_ms, 0) << name;
    EXPECT_GT(p.rate_kbps, 0) << name;
  }
  try {
    apply_link_profile("dialup", o);
    ADD_FAILURE() << "an unknown profile was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wifi, lte, 5g, satellite"), std::string::npos) << e.what();
  }
}

TEST(Netem, EdgeSdThroughTheProxyIsStillExact) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  NetemOptions o;
  o.upstream = srv.address;
  o.delay_ms = 2;
  o.jitter_ms = 1;
  NetemProxy proxy(o);
  proxy.start();
  ClientOptions c;
  c.mode = Mode::kEdgeSd;
  c.server = "127.0.0.1:" + std::to_string(proxy.port());
  c.draft_dir = test::demo_draft_dir();
  auto client = Client::connect(c);
  Request req;
  req.max_new_tokens = 24;
  req.ignore_eos = true;
  const Result got = client->generate("Call me Ishmael.", req);
  auto target = Model::load(test::demo_target_dir());
  GenerateOptions g;
  g.max_new_tokens = 24;
  g.ignore_eos = true;
  EXPECT_EQ(got.ids, test::target_alone(*target, got.prompt_ids, g).output_ids);
  EXPECT_GE(got.stats.network_rtt_ms, 2.0);  // two one-way delays of at least 1 ms
}

TEST(Netem, BadOptionsAreClearErrors) {
  NetemOptions o;
  o.upstream = "127.0.0.1";  // no port
  EXPECT_THROW(NetemProxy{o}, Error);
  o.upstream = "127.0.0.1:9";
  o.delay_ms = -1;
  EXPECT_THROW(NetemProxy{o}, Error);
  o.delay_ms = 0;
  o.loss = 1;  // every packet lost: nothing would arrive
  EXPECT_THROW(NetemProxy{o}, Error);
  o.loss = 0;
  o.listen = "256.1.1.1:0";
  EXPECT_THROW(NetemProxy{o}, Error);
  // An unreachable upstream: the proxied connection is closed at once.
  o.listen = "127.0.0.1:0";
  o.upstream = "127.0.0.1:1";
  NetemProxy proxy(o);
  proxy.start();
  const int fd = connect_to(proxy.port());
  ASSERT_GE(fd, 0);
  EXPECT_EQ(read_until_eof(fd), "");
  close(fd);
}

}  // namespace
}  // namespace splitspec

// The HTTP door's transport (server/http/transport.h) over real loopback
// sockets, with handlers written for each test: deadlines, limits, the
// queue, keep-alive, a client leaving, and stop() among slow sockets.
#include "server/http/transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace splitspec::http {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A plain TCP client: what curl or a hostile script would send.
class Client {
 public:
  explicit Client(int port, int rcvbuf = 0) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  ~Client() { close(fd_); }
  bool send(const std::string& s) { return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()); }
  // Reads until `needle` arrives, the peer closes, or `timeout_s` passes.
  std::string read_until(const std::string& needle, double timeout_s = 5) {
    const auto t0 = Clock::now();
    while (received_.find(needle) == std::string::npos && since(t0) < timeout_s) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buf[65536];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      received_.append(buf, static_cast<size_t>(n));
    }
    return received_;
  }
  // Whether the server closed the connection within `timeout_s`.
  bool closed_within(double timeout_s) {
    read_until("\x01never\x01", timeout_s);
    return closed_;
  }

 private:
  int fd_;
  std::string received_;
  bool closed_ = false;
};

std::string post(const std::string& body = "{}", const std::string& extra = "") {
  return "POST /x HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra + "\r\n" + body;
}

Handlers echo() {
  Handlers h;
  h.check = [](const Head&) { return std::optional<Response>(); };
  h.handle = [](Exchange& ex) { ex.respond({200, "text/plain", "got " + ex.body(), {}}); };
  h.done = [](const Head&, int, uint64_t) {};
  h.next_id = [] { return std::string("req-1"); };
  return h;
}

TEST(HttpTransport, KeepAliveAndPipelinedRequestsAreAnsweredInOrder) {
  Limits l;
  l.keep_alive_requests = 3;
  Server s("127.0.0.1:0", l, {}, echo());
  Client c(s.port());
  ASSERT_TRUE(c.send(post("a") + post("b")));
  const std::string got = c.read_until("got b");
  EXPECT_LT(got.find("got a"), got.find("got b")) << got;
  EXPECT_NE(got.find("X-Request-Id: req-1"), std::string::npos);
  // The third request on the connection is its last.
  ASSERT_TRUE(c.send(post("c")));
  EXPECT_NE(c.read_until("got c").find("Connection: close"), std::string::npos);
  EXPECT_TRUE(c.closed_within(2));
}

// The next pipelined request waits for the last one's worker to return, not
// only for its last byte: found by the fuzz target as a 500 among streams.
TEST(HttpTransport, PipelinedStreamsFollowEachOtherWhole) {
  Handlers h = echo();
  h.handle = [](Exchange& ex) {
    ex.begin_stream(200, "text/event-stream", {});
    ex.send("data: " + ex.body() + "\n\n");
    ex.end_stream();
    // Work after the last byte, as a handler's cleanup does.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  Server s("127.0.0.1:0", {}, {}, h);
  Client c(s.port());
  std::string all;
  for (int i = 0; i < 20; ++i) all += post("n" + std::to_string(i));
  ASSERT_TRUE(c.send(all));
  const std::string got = c.read_until("data: n19");
  EXPECT_EQ(got.find(" 500 "), std::string::npos) << got;
  size_t at = 0;
  for (int i = 0; i < 20; ++i) {
    const size_t next = got.find("data: n" + std::to_string(i) + "\n", at);
    ASSERT_NE(next, std::string::npos) << "answer " << i << " missing or out of order";
    at = next;
  }
}

TEST(HttpTransport, TheHeadIsCheckedBeforeTheBodyIsRead) {
  Handlers h = echo();
  h.check = [](const Head& head) {
    if (head.header("authorization") != "Bearer ok") return std::optional<Response>(Response{401, "text/plain", "no", {}});
    return std::optional<Response>();
  };
  Limits l;
  l.max_body_bytes = 1000;
  Server s("127.0.0.1:0", l, {}, h);
  {
    // A 1 MB body declared and never sent: refused at once, the connection closed.
    Client c(s.port());
    ASSERT_TRUE(c.send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\nAuthorization: Bearer ok\r\n\r\n"));
    EXPECT_EQ(c.read_until("\r\n\r\n", 2).rfind("HTTP/1.1 413", 0), 0u);
    EXPECT_TRUE(c.closed_within(2));
  }
  {
    Client c(s.port());
    ASSERT_TRUE(c.send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 900\r\n\r\n"));
    EXPECT_EQ(c.read_until("\r\n\r\n", 2).rfind("HTTP/1.1 401", 0), 0u);
    EXPECT_TRUE(c.closed_within(2));
  }
  {
    // A chunked body past the limit is cut where it passes it.
    Client c(s.port());
    ASSERT_TRUE(c.send("POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nAuthorization: Bearer ok\r\n\r\n"));
    ASSERT_TRUE(c.send("400\r\n" + std::string(1024, 'x') + "\r\n"));
    EXPECT_EQ(c.read_until("\r\n\r\n", 2).rfind("HTTP/1.1 413", 0), 0u);
  }
  {
    Client c(s.port());
    ASSERT_TRUE(c.send("GET /x HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(20000, 'y') + "\r\n\r\n"));
    EXPECT_EQ(c.read_until("\r\n\r\n", 2).rfind("HTTP/1.1 431", 0), 0u);
  }
  {
    Client c(s.port());
    ASSERT_TRUE(c.send("NOT HTTP AT ALL\r\n\r\n"));
    EXPECT_EQ(c.read_until("\r\n\r\n", 2).rfind("HTTP/1.1 400", 0), 0u);
  }
}

TEST(HttpTransport, ARequestTricklingPastItsDeadlineIsClosed) {
  Limits l;
  l.request_timeout_s = 0.5;
  Server s("127.0.0.1:0", l, {}, echo());
  Client c(s.port());
  const auto t0 = Clock::now();
  ASSERT_TRUE(c.send("POST /x HTTP/1.1\r\n"));
  // A header line every 100 ms keeps a per-read timeout happy, not a deadline.
  bool closed = false;
  while (!closed && since(t0) < 5) {
    c.send("X-a: b\r\n");
    closed = c.closed_within(0.1);
  }
  EXPECT_TRUE(closed);
  // Margins for a loaded machine: the point is that steady trickling does not extend it.
  EXPECT_GT(since(t0), 0.4);
  EXPECT_LT(since(t0), 3.0);
}

// After a 100 Continue the body still has the request's deadline (found by
// libFuzzer: a short body after Expect: 100-continue held its connection).
TEST(HttpTransport, ABodyAfter100ContinueKeepsTheRequestDeadline) {
  Limits l;
  l.request_timeout_s = 0.5;
  Server s("127.0.0.1:0", l, {}, echo());
  Client c(s.port());
  ASSERT_TRUE(c.send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 32\r\nExpect: 100-continue\r\n\r\n{\"short\""));
  const auto t0 = Clock::now();
  EXPECT_TRUE(c.closed_within(5));
  EXPECT_LT(since(t0), 3.0);
}

TEST(HttpTransport, AReaderThatNeverReadsLosesItsStreamAtTheSendDeadline) {
  Limits l;
  l.send_timeout_s = 0.5;
  std::promise<double> stopped;
  std::atomic<bool> gone{false};
  Handlers h = echo();
  h.handle = [&](Exchange& ex) {
    ex.on_gone([&] { gone = true; });
    const auto t0 = Clock::now();
    ex.begin_stream(200, "text/event-stream", {});
    const std::string block(64 << 10, 'x');
    while (ex.send(block) && since(t0) < 30) {
    }
    stopped.set_value(since(t0));
    ex.end_stream();
  };
  Server s("127.0.0.1:0", l, {}, h);
  Client c(s.port(), 4096);
  ASSERT_TRUE(c.send(post()));
  auto f = stopped.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_LT(f.get(), 10.0) << "the stream went on writing to a client that never reads";
  for (int i = 0; i < 100 && !gone; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(gone) << "the handler was not told its client is gone";
}

TEST(HttpTransport, AClientLeavingCancelsItsRequest) {
  std::promise<void> cancelled;
  Handlers h = echo();
  h.handle = [&](Exchange& ex) {
    std::mutex mu;
    std::condition_variable cv;
    bool gone = false;
    ex.on_gone([&] {
      std::lock_guard<std::mutex> lock(mu);
      gone = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu);
    if (cv.wait_for(lock, std::chrono::seconds(10), [&] { return gone; })) cancelled.set_value();
    lock.unlock();
    ex.respond({200, "text/plain", "late", {}});
  };
  Server s("127.0.0.1:0", {}, {}, h);
  {
    Client c(s.port());
    ASSERT_TRUE(c.send(post()));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(cancelled.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
}

TEST(HttpTransport, AFullQueueAndTooManyConnectionsAnswer503) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  Handlers h = echo();
  h.handle = [&](Exchange& ex) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return release; });
    ex.respond({200, "text/plain", "done", {}});
  };
  Limits l;
  l.workers = 1;
  l.max_queued = 1;
  l.max_connections = 3;
  Server s("127.0.0.1:0", l, {}, h);
  Client running(s.port()), queued(s.port()), refused(s.port());
  ASSERT_TRUE(running.send(post()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(queued.send(post()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(refused.send(post()));
  const std::string answer = refused.read_until("\r\n\r\n", 2);
  EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer;
  EXPECT_NE(answer.find("Retry-After: 1"), std::string::npos);
  // The refused one closed, two open: a third may open, a fourth is refused
  // before any request.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Client fourth(s.port());
  Client fifth(s.port());
  EXPECT_EQ(fifth.read_until("\r\n\r\n", 2).rfind("HTTP/1.1 503", 0), 0u);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_NE(running.read_until("done").find("done"), std::string::npos);
  EXPECT_NE(queued.read_until("done").find("done"), std::string::npos);
}

TEST(HttpTransport, StopIsPromptWhateverTheSocketsDo) {
  Handlers h = echo();
  h.handle = [](Exchange& ex) {
    ex.begin_stream(200, "text/event-stream", {});
    const std::string block(64 << 10, 'x');
    while (ex.send(block)) {
    }
    ex.end_stream();
  };
  auto s = std::make_unique<Server>("127.0.0.1:0", Limits{}, TlsFiles{}, h);
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < 16; ++i) {
    slow.push_back(std::make_unique<Client>(s->port()));
    slow.back()->send(i % 2 ? "POST /x HTTP/1.1\r\n" : "POST /x HTTP/1.1\r\nContent-Length: 100\r\n\r\n{");
  }
  Client reader(s->port(), 4096);
  ASSERT_TRUE(reader.send(post()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  s->stop();
  EXPECT_LT(since(t0), 3.0);
  for (auto& c : slow) EXPECT_TRUE(c->closed_within(1));
}

}  // namespace
}  // namespace splitspec::http

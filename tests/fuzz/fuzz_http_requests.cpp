// libFuzzer target: the HTTP door against a live server. One real
// in-process splitspec::Server serves the demo target with --http-listen and
// bearer tokens; each input is the bytes one client sends on one connection,
// so everything the door does with them runs as in production: Beast's
// parser under the transport's limits (server/http/transport.cpp), the
// head's checks (route, token, content type), the JSON body's checks and the
// generation they start (server/http/openai.cpp).
//
// Properties: the server never crashes (ASan, UBSan, aborts); the
// connection is answered or closed within a deadline; an answer's status is
// one the door gives for bad input or limits (100, 200, 400, 401, 403, 404, 405,
// 413, 415, 429, 431, 503), never a 500, and no header carries an
// exception's text; afterwards GET /v1/models with the token is a 200 and
// no session is left open.
//
// Input: one flags byte, then the bytes to send.
//   flags bit 0: sent in pieces of 1 to 8 bytes (a trickling client);
//   flags bit 1: the client closes its socket right after sending (gone
//                before its answer).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "server/server.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kRequestTimeoutS = 0.5;
// A generation here is at most 64 tokens of the demo target.
constexpr double kAnswerDeadlineS = 60;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_http_requests: %s\n", what.c_str());
  std::abort();
}

splitspec::Server& live() {
  static splitspec::Server* server = [] {
    splitspec::ServerConfig c;
    const std::filesystem::path demo = std::filesystem::path(SPLITSPEC_SOURCE_DIR) / "models" / "demo-target";
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("splitspec-fuzz-http-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.model"}) {
      std::error_code ec;
      std::filesystem::remove(dir / f, ec);
      std::filesystem::create_symlink(demo / f, dir / f);
    }
    std::ofstream(dir / "tokens") << "robot-1\n";
    c.target_dir = dir.string();
    c.listen = "127.0.0.1:0";
    c.http_listen = "127.0.0.1:0";
    c.auth_tokens_file = (dir / "tokens").string();
    c.allow_insecure_tokens = true;
    c.max_sessions = 2;
    c.max_new_tokens = 64;
    c.compute_threads = 1;
    c.shutdown_grace_s = 1;
    c.max_message_bytes = 64 << 10;
    c.http_request_timeout_s = kRequestTimeoutS;
    c.http_send_timeout_s = 2;
    c.log_level = "off";  // every refused input would log
    auto* s = new splitspec::Server(c);
    s->start();
    // libFuzzer ends with exit(), the server still serving: Server stops
    // itself at exit, before static destructors run.
    return s;
  }();
  return *server;
}

// Each input comes from its own loopback address (127.0.0.2 on), so that
// the failed-token delay one input earns (failed_tokens.h) does not slow
// the inputs after it: that delay has its own test.
int connect_to(int port, bool own_address = false) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (own_address) {
    static uint32_t next = 2;
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl((127u << 24) | (next++ & 0xffffff));
    if (next > 0xfffffe) next = 2;
    if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) fail("cannot bind a loopback source address");
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) fail("cannot connect to the HTTP port");
  return fd;
}

// Whether `got` holds a whole final answer (after any 100 Continue): its
// Content-Length of body, or its last chunk.
bool answered(const std::string& got) {
  size_t at = 0;
  while (got.compare(at, 12, "HTTP/1.1 100") == 0) {
    const size_t end = got.find("\r\n\r\n", at);
    if (end == std::string::npos) return false;
    at = end + 4;
  }
  const size_t end = got.find("\r\n\r\n", at);
  if (end == std::string::npos) return false;
  const std::string head = got.substr(at, end - at);
  const size_t body = end + 4;
  if (head.find("Transfer-Encoding: chunked") != std::string::npos)
    return got.compare(body, 5, "0\r\n\r\n") == 0 || got.find("\r\n0\r\n\r\n", body) != std::string::npos;
  const size_t length = head.find("Content-Length: ");
  if (length == std::string::npos) return false;  // read to the close
  return got.size() - body >= std::stoul(head.substr(length + 16));
}

// What the server sends until it closes the connection, or until an answer
// is whole and nothing more follows for 20 ms (a kept-alive connection
// would otherwise wait for the server's request deadline).
std::string read_all(int fd, const char* what) {
  std::string got;
  const auto t0 = Clock::now();
  for (;;) {
    if (std::chrono::duration<double>(Clock::now() - t0).count() > kAnswerDeadlineS)
      fail(std::string(what) + ": the connection was neither answered nor closed within the deadline");
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, answered(got) ? 20 : 100) <= 0) {
      if (answered(got)) return got;
      continue;
    }
    char buf[65536];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
}

void check_answer(const std::string& got) {
  static const std::set<int> allowed = {100, 200, 400, 401, 403, 404, 405, 413, 415, 429, 431, 503};
  static const std::regex status_line("(^|\r\n|\n)HTTP/1\\.1 (\\d{3}) ");
  for (auto it = std::sregex_iterator(got.begin(), got.end(), status_line); it != std::sregex_iterator(); ++it) {
    const int status = std::stoi((*it)[2]);
    if (!allowed.count(status))
      fail("status " + std::to_string(status) + " in: " + got.substr(static_cast<size_t>(it->position(2)) - 9, 600));
  }
  std::string lower = got.substr(0, got.find("\r\n\r\n"));
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower.find("exception") != std::string::npos) fail("internals in the headers: " + got.substr(0, 400));
}

void check_still_serving(splitspec::Server& s) {
  const int fd = connect_to(s.http_port());
  const std::string req = "GET /v1/models HTTP/1.1\r\nHost: f\r\nAuthorization: Bearer robot-1\r\nConnection: close\r\n\r\n";
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) fail("cannot send to the door");
  const std::string got = read_all(fd, "GET /v1/models after an input");
  close(fd);
  if (got.rfind("HTTP/1.1 200", 0) != 0) fail("GET /v1/models after an input: " + got.substr(0, 200));
  // A generation cancelled by its client leaving ends within moments.
  const auto t0 = Clock::now();
  while (s.active_sessions() != 0) {
    if (std::chrono::duration<double>(Clock::now() - t0).count() > 30) fail("a session is still open 30 s after its input");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  splitspec::Server& s = live();
  const uint8_t flags = data[0];
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const int fd = connect_to(s.http_port(), true);
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = (flags & 1) ? std::min<size_t>(1 + (at * 7 + 3) % 8, bytes.size() - at) : bytes.size() - at;
    if (send(fd, bytes.data() + at, n, MSG_NOSIGNAL) <= 0) break;  // the server closed: allowed
    at += n;
  }
  if (!(flags & 2)) check_answer(read_all(fd, "the input's connection"));
  close(fd);
  check_still_serving(s);
  return 0;
}

#include "server/metrics_http.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/util/error.h"

namespace splitspec {

MetricsHttpServer::MetricsHttpServer(const std::string& listen, std::function<std::string()> render)
    : render_(std::move(render)) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) throw Error("metrics_listen must be HOST:PORT, got '" + listen + "'");
  const std::string host = listen.substr(0, colon), port = listen.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) throw Error("metrics_listen " + listen + ": cannot resolve");
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
      listen_fd_ = fd;
      break;
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0) throw Error("cannot listen for metrics on " + listen + ": " + std::strerror(errno));
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  thread_ = std::thread([this] { serve(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  stopping_ = true;
  shutdown(listen_fd_, SHUT_RDWR);
  thread_.join();
  close(listen_fd_);
}

void MetricsHttpServer::serve() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    const int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return;  // shut down
    }
    handle(fd);
    close(fd);
  }
}

void MetricsHttpServer::handle(int fd) {
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string req;
  char buf[1024];
  // The request line is all we need; headers are read up to a bound.
  while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos && req.size() < 8192) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    req.append(buf, static_cast<size_t>(n));
  }
  std::string status = "200 OK", body;
  const std::string line = req.substr(0, req.find_first_of("\r\n"));
  if (line.rfind("GET ", 0) != 0 || line.find(" HTTP/1.") == std::string::npos) {
    status = "400 Bad Request";
    body = "expected GET /metrics\n";
  } else {
    const std::string path = line.substr(4, line.find(' ', 4) - 4);
    if (path == "/metrics")
      body = render_();
    else {
      status = "404 Not Found";
      body = "try /metrics\n";
    }
  }
  const std::string head = "HTTP/1.1 " + status + "\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  const std::string out = head + body;
  size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace splitspec

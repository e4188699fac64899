#pragma once
// A minimal HTTP endpoint for Prometheus scrapes: GET /metrics answers with
// the text exposition format; anything else gets 404 (or 400 when it is not
// HTTP). One connection at a time with short timeouts: a scraper, not a web
// server, and a slow or garbled client cannot stall it for long.
#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace splitspec {

class MetricsHttpServer {
 public:
  // Binds HOST:PORT (port 0: any free port); throws splitspec::Error.
  MetricsHttpServer(const std::string& listen, std::function<std::string()> render);
  ~MetricsHttpServer();
  int port() const { return port_; }

 private:
  void serve();
  void handle(int fd);

  std::function<std::string()> render_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace splitspec

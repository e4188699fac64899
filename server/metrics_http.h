#pragma once
// The Prometheus endpoint, GET /metrics in the text exposition format,
// served by prometheus-cpp's exposer (civetweb): a few worker threads and a
// request timeout, so a slow or silent client cannot stall a scrape.
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace prometheus {
class Exposer;
struct MetricFamily;
}  // namespace prometheus

namespace splitspec {

class MetricsHttpServer {
 public:
  using Collect = std::function<std::vector<prometheus::MetricFamily>()>;
  // Listens on HOST:PORT (a name or a numeric address, [v6] bracketed; port
  // 0: any free port); throws splitspec::Error when it cannot.
  MetricsHttpServer(const std::string& listen, Collect collect);
  ~MetricsHttpServer();
  int port() const { return port_; }

 private:
  std::shared_ptr<void> collectable_;  // what the exposer holds weakly
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace splitspec

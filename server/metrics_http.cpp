#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <exception>

#include "common/util/error.h"
#include "common/util/host_port.h"

namespace splitspec {

namespace {

class Collector : public prometheus::Collectable {
 public:
  explicit Collector(MetricsHttpServer::Collect collect) : collect_(std::move(collect)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return collect_(); }

 private:
  MetricsHttpServer::Collect collect_;
};

// HOST:PORT as civetweb's listening_ports takes it: a numeric address
// ([v6] bracketed) and the port.
std::string civetweb_address(const std::string& listen) {
  const auto [host, port_number] = split_host_port(listen, "metrics_listen");
  const std::string port = std::to_string(port_number);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr)
    throw Error("metrics_listen " + listen + ": cannot resolve " + host);
  char numeric[INET6_ADDRSTRLEN] = {};
  const bool v6 = res->ai_family == AF_INET6;
  const void* addr = v6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(res->ai_addr)->sin6_addr)
                        : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr);
  inet_ntop(res->ai_family, addr, numeric, sizeof numeric);
  freeaddrinfo(res);
  return v6 ? "[" + std::string(numeric) + "]:" + port : std::string(numeric) + ":" + port;
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(const std::string& listen, Collect collect) {
  const std::string address = civetweb_address(listen);
  auto collector = std::make_shared<Collector>(std::move(collect));
  try {
    // A worker sits on a client that sends nothing (or a request a byte at
    // a time) until the timeout, which bounds the whole request: three such
    // clients at once still leave a worker for the scraper. deploy/'s
    // network policy lets only the monitoring namespace reach this port.
    exposer_ = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", address, "num_threads", "4", "request_timeout_ms", "2000"});
  } catch (const std::exception& e) {
    throw Error("cannot listen for metrics on " + listen + " (address in use or invalid?): " + e.what());
  }
  exposer_->RegisterCollectable(collector);
  collectable_ = collector;
  const std::vector<int> ports = exposer_->GetListeningPorts();
  port_ = ports.empty() ? 0 : ports.front();
}

MetricsHttpServer::~MetricsHttpServer() = default;

}  // namespace splitspec

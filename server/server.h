#pragma once
// splitspec-server as a library: loads the target, serves splitspec.v1 with
// the grpc.health.v1 health service and server reflection. The binary and the
// tests both run it this way.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "server/server_config.h"

namespace grpc {
class Server;
class CallbackGenericService;
}

namespace splitspec {

struct ServiceContext;
class SplitSpecService;
class MetricsHttpServer;
class OpenAiHttp;

class Server {
 public:
  // Loads the target (and its tokenizer, when it ships one). Throws
  // splitspec::Error on a bad config or model.
  explicit Server(ServerConfig config);
  ~Server();

  // Binds and starts serving; throws splitspec::Error when the address cannot
  // be bound. With port 0 the kernel picks one: see port().
  void start();
  int port() const { return port_; }
  // The Prometheus endpoint's port, when config.metrics_listen is set (else 0).
  int metrics_port() const;
  // The plaintext health port, when config.health_listen is set (else 0).
  int health_port() const { return health_port_; }
  // The OpenAI-compatible HTTP port, when config.http_listen is set (else 0).
  int http_port() const;
  // Graceful stop: health turns NOT_SERVING, new streams are refused, streams
  // in flight get config.shutdown_grace_s to finish before they are cancelled.
  // A program that calls exit() with a server still serving gets it stopped
  // at once, streams cancelled, before static destructors run.
  void shutdown();
  int32_t active_sessions() const;
  // What /metrics would answer now (Prometheus text format).
  std::string metrics_text() const;

 private:
  void stop(double grace_s);
  static void stop_all_at_exit();
  // Ends Session streams over their idle or lifetime limit, and notices a
  // lost device, a few times a second, until stop_reaper().
  void start_reaper();
  void stop_reaper();
  // Once the target's device is lost for good: streams refused, health
  // NOT_SERVING (the reaper calls it).
  void watch_device();

  std::unique_ptr<ServiceContext> ctx_;
  std::unique_ptr<SplitSpecService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::CallbackGenericService> health_unknown_;  // declared first: outlives health_server_
  std::unique_ptr<grpc::Server> health_server_;
  std::unique_ptr<MetricsHttpServer> metrics_;
  std::unique_ptr<OpenAiHttp> http_;
  int port_ = 0;
  int health_port_ = 0;
  std::thread reaper_;
  std::mutex reaper_mu_;
  std::condition_variable reaper_cv_;
  bool reaper_stop_ = false;
};

}  // namespace splitspec

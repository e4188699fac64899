#pragma once
// An OpenAI-compatible HTTP endpoint (`http_listen`): GET /v1/models, POST
// /v1/completions and /v1/chat/completions, streamed as server-sent events or
// not. Every request runs as a Generate call on the server's own in-process
// channel: the same cloud-ar loop, batched with the gRPC sessions, under the
// same session limits and metrics. Text goes in and out through the target's
// tokenizer and its chat template; the bearer tokens of `auth_tokens_file`
// apply (401 without one). Served by cpp-httplib (Debian's
// libcpp-httplib-dev).
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace splitspec {

struct ServiceContext;
class Tokenizer;

class OpenAiHttp {
 public:
  // Listens on `listen` (HOST:PORT, port 0: any free one) at once; throws
  // splitspec::Error when it cannot, or when the target has no tokenizer.
  OpenAiHttp(const std::string& listen, ServiceContext& ctx, std::shared_ptr<grpc::Channel> channel);
  // Stops accepting and waits for requests in flight.
  ~OpenAiHttp();

  int port() const { return port_; }

 private:
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace splitspec

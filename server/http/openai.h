#pragma once
// An OpenAI-compatible HTTP endpoint (`http_listen`): GET /v1/models, POST
// /v1/completions and /v1/chat/completions, streamed as server-sent events or
// not. Every request runs as a Generate call on the server's own in-process
// channel: the same cloud-ar loop, batched with the gRPC sessions, under the
// same session limits and metrics. Text goes in and out through the target's
// tokenizer and its chat template. The door is as strong as the gRPC one:
// the same TLS and client names (unless http_tls says TLS ends upstream),
// the same bearer tokens, checked before the body is read; the transport
// (transport.h) bounds what a client can hold.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace splitspec {

struct ServiceContext;
class Tokenizer;

namespace http {
class Server;
}

class OpenAiHttp {
 public:
  // Listens on ctx.config.http_listen at once; throws splitspec::Error when
  // it cannot, or when the target has no tokenizer.
  OpenAiHttp(ServiceContext& ctx, std::shared_ptr<grpc::Channel> channel);
  // Closes every connection; the caller has cancelled the generations.
  ~OpenAiHttp();

  int port() const;
  bool tls() const;

 private:
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<http::Server> http_;
};

}  // namespace splitspec

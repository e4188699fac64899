#include "server/auth_gate.h"

#include <grpc/grpc_security.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <string_view>

#include "server/log_text.h"

namespace splitspec {

namespace {

// The names of a mutual-TLS peer's certificate: common name and subject
// alternative names, as gRPC's TLS handshake put them in the auth context.
std::vector<std::string> certificate_names(const grpc::AuthContext& context) {
  std::vector<std::string> names;
  for (const char* property : {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME})
    for (const grpc::string_ref& v : context.FindPropertyValues(property)) names.emplace_back(v.data(), v.size());
  return names;
}

grpc::Status check_names(ServiceContext& ctx, const std::vector<std::string>& names) {
  if (const auto refused = refused_client_names(ctx, names)) return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, *refused);
  return grpc::Status::OK;
}

grpc::Status decide(ServiceContext& ctx, std::string_view path, const std::optional<std::string>& authorization) {
  if (path.rfind("/grpc.health.v1.Health/", 0) == 0) return grpc::Status::OK;
  if (const auto refused = refused_token(ctx, authorization, "grpc", std::string(path)))
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, *refused);
  return grpc::Status::OK;
}

// TLS credentials take a C++ processor.
class Gate final : public grpc::AuthMetadataProcessor {
 public:
  explicit Gate(ServiceContext& ctx) : ctx_(ctx) {}
  // Tokens are compared in memory (the file is re-read at most every
  // tls_reload_s): quick enough for gRPC's own threads.
  bool IsBlocking() const override { return false; }
  // Nothing is added to the auth context: gRPC keeps a connection's
  // properties for its lifetime, so a property per call would grow without
  // end. Handlers name the token from its header (token_identity).
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context, OutputMetadata*,
                       OutputMetadata*) override {
    std::string_view path;
    std::optional<std::string> authorization;
    for (const auto& [key, value] : metadata) {
      if (key == ":path") path = std::string_view(value.data(), value.size());
      if (key == "authorization") authorization = std::string(value.data(), value.size());
    }
    if (!ctx_.config.tls_client_names.empty() && path.rfind("/grpc.health.v1.Health/", 0) != 0)
      if (grpc::Status s = check_names(ctx_, certificate_names(*context)); !s.ok()) return s;
    return decide(ctx_, path, authorization);
  }

 private:
  ServiceContext& ctx_;
};

// gRPC's C++ plaintext credentials refuse a processor; its core's insecure
// credentials take one through the C API, so a plaintext port (tokens on a
// trusted network, allow_insecure_tokens) gets the same gate.
class PlaintextGate final : public grpc::ServerCredentials {
 public:
  explicit PlaintextGate(ServiceContext& ctx) : ctx_(ctx) {}
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    grpc_server_credentials* creds = grpc_insecure_server_credentials_create();
    grpc_server_credentials_set_auth_metadata_processor(creds, {&process, [](void*) {}, &ctx_});
    const int port = grpc_server_add_http2_port(server, addr.c_str(), creds);
    grpc_server_credentials_release(creds);
    return port;
  }

  static void process(void* state, grpc_auth_context*, const grpc_metadata* md, size_t count,
                      grpc_process_auth_metadata_done_cb done, void* user_data) {
    auto& ctx = *static_cast<ServiceContext*>(state);
    std::string_view path;
    std::optional<std::string> authorization;
    for (size_t i = 0; i < count; ++i) {
      const auto key = std::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].key)),
                                        GRPC_SLICE_LENGTH(md[i].key));
      const auto value = std::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].value)),
                                          GRPC_SLICE_LENGTH(md[i].value));
      if (key == ":path") path = value;
      if (key == "authorization") authorization = std::string(value);
    }
    const grpc::Status s = decide(ctx, path, authorization);
    if (s.ok())
      done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
    else
      done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, s.error_message().c_str());
  }

  ServiceContext& ctx_;
};

}  // namespace

std::optional<std::string> refused_client_names(ServiceContext& ctx, const std::vector<std::string>& names) {
  const std::vector<std::string>& allowed = ctx.config.tls_client_names;
  if (allowed.empty()) return std::nullopt;
  for (const std::string& n : names)
    if (std::find(allowed.begin(), allowed.end(), n) != allowed.end()) return std::nullopt;
  std::string seen;
  for (const std::string& n : names) seen += (seen.empty() ? "" : ", ") + n;
  ctx.counters.unauthenticated.fetch_add(1);
  spdlog::warn("event=client_name_refused names=\"{}\"", log_text(seen));
  return "the client certificate's names (" + (seen.empty() ? std::string("none") : seen) +
         ") are not in the server's tls_client_names";
}

std::optional<std::string> refused_token(ServiceContext& ctx, const std::optional<std::string>& authorization,
                                         std::string_view door, const std::string& what, const std::string& peer) {
  if (!ctx.auth) return std::nullopt;
  std::optional<std::string> refused;
  std::optional<std::string> token;
  if (!authorization || authorization->empty())
    refused = "this server requires a bearer token (authorization: Bearer <token>); give the client one";
  else if (!(token = TokenAuth::bearer(*authorization)) || !ctx.auth->accepts(*token))
    refused = "the bearer token was not accepted";
  if (refused) {
    ctx.counters.unauthenticated.fetch_add(1);
    spdlog::warn("event=unauthenticated door={} method=\"{}\"{} error=\"{}\"", door, log_text(what),
                 peer.empty() ? "" : " peer=" + log_text(peer), *refused);
  }
  return refused;
}

std::shared_ptr<grpc::ServerCredentials> gated_credentials(std::shared_ptr<grpc::ServerCredentials> credentials,
                                                           ServiceContext& ctx) {
  if (!credentials) return std::make_shared<PlaintextGate>(ctx);
  // Over TLS the gate also checks a mutual-TLS client's names.
  credentials->SetAuthMetadataProcessor(std::make_shared<Gate>(ctx));
  return credentials;
}

}  // namespace splitspec

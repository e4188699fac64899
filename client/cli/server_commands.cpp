// Operator commands against a running server: `info` (GetInfo, counters
// included, as JSON) and `health` (grpc.health.v1 Check; the exit status
// suits readiness probes).
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <iostream>
#include <memory>

#include "client/cli/commands.h"
#include "client/server_link.h"
#include "common/util/error.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/splitspec.grpc.pb.h"

namespace splitspec::cli {

namespace {

struct ServerArgs {
  std::string server;
  double timeout_s = 5;
  ClientOptions security;  // its TLS and token fields
};

void add_security_options(CLI::App* cmd, ServerArgs& a) {
  cmd->add_option("--tls-ca", a.security.tls_ca, "Speak TLS, trusting servers this PEM CA signed");
  cmd->add_option("--tls-cert", a.security.tls_cert, "This client's PEM certificate (mutual TLS; with --tls-key)");
  cmd->add_option("--tls-key", a.security.tls_key, "The PEM key of --tls-cert");
  cmd->add_option("--tls-server-name", a.security.tls_server_name,
                  "The name the server's certificate carries, when not the address's host");
  cmd->add_option("--auth-token-file", a.security.auth_token_file,
                  "A file whose first line is the bearer token (or set SPLITSPEC_AUTH_TOKEN)");
  cmd->add_flag("--allow-insecure-tokens", a.security.allow_insecure_tokens,
                "Send the token without TLS too (a network you trust): by default a token needs --tls-ca");
}

std::shared_ptr<grpc::Channel> channel(const ServerArgs& a) {
  ClientOptions o = a.security;
  if (const char* token = std::getenv("SPLITSPEC_AUTH_TOKEN"); token && o.auth_token_file.empty()) o.auth_token = token;
  return secure_channel(a.server, link_security(o));
}

std::chrono::system_clock::time_point deadline(const ServerArgs& a) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(a.timeout_s * 1000));
}

int run_info(const ServerArgs& a) {
  auto stub = v1::SplitSpec::NewStub(channel(a));
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline(a));
  v1::ServerInfo info;
  const grpc::Status s = stub->GetInfo(&ctx, v1::GetInfoRequest{}, &info);
  if (!s.ok()) throw Error("server " + a.server + ": GetInfo failed: " + code_name(s.error_code()) + ": " + s.error_message());
  std::string json;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(info, &json, o).ok()) throw Error("cannot print GetInfo as JSON");
  std::cout << json;
  return 0;
}

int run_health(const ServerArgs& a) {
  auto stub = grpc::health::v1::Health::NewStub(channel(a));
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline(a));
  grpc::health::v1::HealthCheckResponse r;
  const grpc::Status s = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest{}, &r);
  if (!s.ok())
    throw Error("server " + a.server + ": health check failed: " + code_name(s.error_code()) + ": " + s.error_message());
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(r.status()) << std::endl;
  return r.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace

std::vector<Command> add_server_commands(CLI::App& app) {
  auto info = std::make_shared<ServerArgs>();
  CLI::App* i = app.add_subcommand("info", "Print a server's GetInfo (model, limits, live counters) as JSON");
  i->add_option("--server", info->server, "HOST:PORT")->required();
  i->add_option("--timeout-s", info->timeout_s, "Give up after this long")->capture_default_str();
  add_security_options(i, *info);
  auto health = std::make_shared<ServerArgs>();
  CLI::App* h = app.add_subcommand("health", "grpc.health.v1 check: prints the status; exit 0 only when SERVING");
  h->add_option("--server", health->server, "HOST:PORT")->required();
  h->add_option("--timeout-s", health->timeout_s, "Give up after this long")->capture_default_str();
  add_security_options(h, *health);
  return {{i, [info]() { return run_info(*info); }}, {h, [health]() { return run_health(*health); }}};
}

}  // namespace splitspec::cli

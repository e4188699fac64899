#include "client/server_link.h"

#include <spdlog/spdlog.h>

#include "proto/convert.h"

#include <fstream>
#include <sstream>

#include <grpcpp/support/client_interceptor.h>

namespace splitspec {

namespace {

// No server answers at the address (or it is draining): what an offline
// start goes on from. Anything else (a bad token, a refused request) is not.
class Unreachable : public Error {
 public:
  using Error::Error;
};

// Adds "authorization: Bearer <token>" to every call of the channel.
class BearerToken final : public grpc::experimental::Interceptor {
 public:
  explicit BearerToken(const std::string& header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA))
      methods->GetSendInitialMetadata()->insert({"authorization", header_});
    methods->Proceed();
  }

 private:
  const std::string& header_;
};

class BearerTokenFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(std::string token) : header_("Bearer " + std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new BearerToken(header_);
  }

 private:
  const std::string header_;
};

// The gRPC target for `address`: a URI as it is; a list of IPv4 HOST:PORT
// as an ipv4: URI.
std::string channel_target(const std::string& address) {
  for (const char* scheme : {"dns:", "ipv4:", "ipv6:", "unix:"})
    if (address.rfind(scheme, 0) == 0) return address;
  if (address.find(',') == std::string::npos) return address;
  std::string list;
  size_t start = 0;
  while (start <= address.size()) {
    size_t end = address.find(',', start);
    if (end == std::string::npos) end = address.size();
    const std::string one = address.substr(start, end - start);
    const size_t colon = one.rfind(':');
    const std::string host = colon == std::string::npos ? one : one.substr(0, colon);
    if (one.empty() || colon == std::string::npos || host.find_first_not_of("0123456789.") != std::string::npos)
      throw Error("server list '" + address + "': each entry must be an IPv4 HOST:PORT ('" + one +
                  "' is not); for a name with several addresses give dns:///NAME:PORT");
    list += (list.empty() ? "" : ",") + one;
    start = end + 1;
  }
  return "ipv4:" + list;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read the " + std::string(what));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

LinkSecurity link_security(const ClientOptions& o) {
  LinkSecurity s;
  if (o.tls_cert.empty() != o.tls_key.empty()) throw Error("tls_cert and tls_key go together (mutual TLS): give both");
  if (!o.tls_cert.empty() && o.tls_ca.empty()) throw Error("a client certificate needs TLS: give tls_ca too");
  if (!o.tls_ca.empty()) {
    s.ca_pem = read_file(o.tls_ca, "TLS CA certificate");
    if (s.ca_pem.find("-----BEGIN CERTIFICATE") == std::string::npos) throw Error(o.tls_ca + ": not a PEM certificate");
  }
  if (!o.tls_cert.empty()) {
    s.cert_pem = read_file(o.tls_cert, "TLS client certificate");
    s.key_pem = read_file(o.tls_key, "TLS client key");
  }
  s.server_name = o.tls_server_name;
  if (!o.auth_token.empty() && !o.auth_token_file.empty()) throw Error("give auth_token or auth_token_file, not both");
  s.token = o.auth_token;
  if (!o.auth_token_file.empty()) {
    std::istringstream lines(read_file(o.auth_token_file, "auth token file"));
    std::getline(lines, s.token);
    while (!s.token.empty() && (s.token.back() == '\r' || s.token.back() == ' ')) s.token.pop_back();
    if (s.token.empty()) throw Error(o.auth_token_file + ": the first line holds no token");
  }
  if (!s.token.empty() && s.ca_pem.empty() && !o.allow_insecure_tokens)
    throw Error("a bearer token over plaintext can be read by anyone on the network: give tls_ca (TLS), or set "
                "allow_insecure_tokens (--allow-insecure-tokens) for a network you trust");
  return s;
}

std::shared_ptr<grpc::Channel> secure_channel(const std::string& address, const LinkSecurity& security,
                                              grpc::ChannelArguments args) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!security.ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = security.ca_pem;
    ssl.pem_cert_chain = security.cert_pem;
    ssl.pem_private_key = security.key_pem;
    credentials = grpc::SslCredentials(ssl);
    if (!security.server_name.empty()) args.SetSslTargetNameOverride(security.server_name);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!security.token.empty()) interceptors.push_back(std::make_unique<BearerTokenFactory>(security.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(channel_target(address), credentials, args,
                                                                 std::move(interceptors));
}

ServerLink::ServerLink(const std::string& address, std::chrono::milliseconds timeout, const LinkSecurity& security)
    : address_(address) {
  open_channel(security);
  reach(timeout, security);
}

ServerLink::ServerLink(const std::string& address, std::chrono::milliseconds timeout, const LinkSecurity& security,
                       v1::ServerInfo stand_in)
    : address_(address) {
  open_channel(security);
  try {
    reach(timeout, security);
  } catch (const Unreachable& e) {
    spdlog::warn("{}: starting on the fallback target; generations move to the server once it answers", e.what());
    info_ = std::move(stand_in);
    confirmed_ = false;
  }
}

void ServerLink::open_channel(const LinkSecurity& security) {
  security_ = security;
  grpc::ChannelArguments args;
  // Subchannels of its own: a channel opened again after an offline start
  // must not inherit one that gRPC's shared pool keeps failing.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Sessions spread over every replica the target names, and a replica
  // whose health is not SERVING (draining on SIGTERM) gets no new stream.
  args.SetServiceConfigJSON(R"({"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}})");
  // Notice a server that died without closing the connection.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // A generation waiting to resume must see a restarted server within a
  // fraction of a second, not after gRPC's default backoff (1 s growing to
  // 120 s). Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: that is each attempt's
  // connect timeout, which a slow link needs long.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250);
  channel_ = secure_channel(address_, security, args);
  stub_ = v1::SplitSpec::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
}

void ServerLink::reach(std::chrono::milliseconds timeout, const LinkSecurity& security) {
  const std::string& address = address_;
  const std::string hint = security.ca_pem.empty()
                               ? "is it running? is the address right? a server with TLS needs the client's tls_ca"
                               : "is it running? does it speak TLS, with a certificate the given CA signed and "
                                 "naming this host? mutual TLS needs the client's certificate and key";
  // A refused connection fails at once rather than at the timeout.
  const auto deadline = std::chrono::system_clock::now() + timeout;
  grpc_connectivity_state state = channel_->GetState(true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) {
      // The channel uses only replicas whose health says SERVING: tell a
      // draining server from one that cannot be reached.
      auto health = grpc::health::v1::Health::NewStub(secure_channel(address, security));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
      grpc::health::v1::HealthCheckResponse r;
      if (health->Check(&ctx, grpc::health::v1::HealthCheckRequest{}, &r).ok() &&
          r.status() != grpc::health::v1::HealthCheckResponse::SERVING)
        throw Unreachable("server " + address + " is shutting down (its health is not SERVING)");
      throw Unreachable("cannot reach server " + address + ": connection failed (" + hint + ")");
    }
    if (!channel_->WaitForStateChange(state, deadline))
      throw Unreachable("cannot reach server " + address + " within " + std::to_string(timeout.count()) + " ms (" + hint + ")");
    state = channel_->GetState(true);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  const grpc::Status s = stub_->GetInfo(&ctx, v1::GetInfoRequest{}, &info_);
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
    throw Unreachable(error("GetInfo failed", s).what());
  if (!s.ok()) throw error("GetInfo failed", s);
  if (!info_.serving()) throw Unreachable("server " + address + " is shutting down");
}

v1::ServerInfo ServerLink::fetch_info(std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::ServerInfo out;
  const grpc::Status s = stub_->GetInfo(&ctx, v1::GetInfoRequest{}, &out);
  if (!s.ok()) throw error("GetInfo failed", s);
  return out;
}

bool ServerLink::wait_connected(std::chrono::steady_clock::time_point until, bool refused_ends,
                                const std::function<bool()>& stop) {
  grpc_connectivity_state state = channel_->GetState(true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_SHUTDOWN || (refused_ends && state == GRPC_CHANNEL_TRANSIENT_FAILURE)) return false;
    const auto now = std::chrono::steady_clock::now();
    if (now >= until || (stop && stop())) return false;
    // In slices, so that a cancel is seen within one.
    const auto slice = std::min(until - now, std::chrono::steady_clock::duration(std::chrono::milliseconds(50)));
    if (channel_->WaitForStateChange(
            state, std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(slice)))
      state = channel_->GetState(true);
  }
  return true;
}

void ServerLink::check_same_target(std::chrono::milliseconds timeout) {
  // A channel that never reached the server stays failed in gRPC 1.51 after
  // the server comes up; a new one connects.
  if (!confirmed_) open_channel(security_);
  const v1::ServerInfo now = fetch_info(timeout);
  auto describe = [](const v1::ServerInfo& i) {
    return i.model_name() + " (vocabulary " + std::to_string(i.vocab_size()) + ", context " +
           std::to_string(i.max_context()) + ", hidden size " + std::to_string(i.hidden_size()) +
           (i.weight_type().empty() ? "" : ", " + i.weight_type()) +
           (i.weights_digest().empty() ? "" : ", weights digest " + i.weights_digest()) +
           (i.backend().empty() ? "" : ", on " + i.backend() + " " + i.backend_arch() + " kernels " + i.kernels_version()) +
           ")";
  };
  if (!confirmed_) {
    // First contact after an offline start: the server must serve the
    // fallback's model, which is all the stand-in knows of.
    if (!now.serving()) throw error("is shutting down");
    const auto differs = [](const std::string& a, const std::string& b) { return !a.empty() && !b.empty() && a != b; };
    if (now.vocab_size() != info_.vocab_size() || now.hidden_size() != info_.hidden_size() ||
        differs(now.tokenizer_fingerprint(), info_.tokenizer_fingerprint()) ||
        differs(now.weights_digest(), info_.weights_digest()) || differs(now.weight_type(), info_.weight_type()) ||
        (now.kv_cache().empty() ? "f32" : now.kv_cache()) != info_.kv_cache())
      throw error("serves " + describe(now) + ", not the fallback target " + describe(info_) +
                  " this client started on: it must be the same model");
    if (confirm_check_) confirm_check_(now);
    info_ = now;
    confirmed_ = true;
    return;
  }
  if (now.model_name() != info_.model_name() || now.vocab_size() != info_.vocab_size() ||
      now.tokenizer_fingerprint() != info_.tokenizer_fingerprint() || now.max_context() != info_.max_context() ||
      now.hidden_size() != info_.hidden_size() || now.weight_type() != info_.weight_type() ||
      now.weights_digest() != info_.weights_digest() || now.kv_cache() != info_.kv_cache() ||
      now.backend() != info_.backend() || now.backend_arch() != info_.backend_arch() ||
      now.kernels_version() != info_.kernels_version())
    throw error("now serves " + describe(now) + ", not " + describe(info_) + " as when this client connected");
}

bool ServerLink::serving(std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::health::v1::HealthCheckResponse r;
  // Unconfirmed, the link's channel may never connect (check_same_target):
  // ask on a channel of this call's own.
  std::unique_ptr<grpc::health::v1::Health::Stub> fresh;
  if (!confirmed_) fresh = grpc::health::v1::Health::NewStub(secure_channel(address_, security_));
  const grpc::Status s = (fresh ? *fresh : *health_).Check(&ctx, grpc::health::v1::HealthCheckRequest{}, &r);
  return s.ok() && r.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

Error ServerLink::error(const std::string& what, const grpc::Status& s) const {
  std::string hint;
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) hint = " (is the server running and reachable?)";
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) hint = " (the request's deadline passed)";
  return Error("server " + address_ + ": " + what + ": " + code_name(s.error_code()) + ": " + s.error_message() + hint);
}

Error ServerLink::error(const std::string& what) const { return Error("server " + address_ + ": " + what); }

v1::GenerationRequest generation_request(const std::vector<int32_t>& prompt, const GenerateOptions& o, int64_t vocab,
                                         const std::string& tokenizer_fingerprint) {
  v1::GenerationRequest w;
  w.mutable_prompt_ids()->Add(prompt.begin(), prompt.end());
  *w.mutable_sampling() = to_wire(o.sampling);
  w.set_max_new_tokens(o.max_new_tokens);
  w.set_ignore_eos(o.ignore_eos);
  w.set_vocab_size(static_cast<int32_t>(vocab));
  w.set_tokenizer_fingerprint(tokenizer_fingerprint);
  return w;
}

void check_prompt_for_server(const std::vector<int32_t>& prompt, int64_t vocab, int64_t context) {
  for (int32_t t : prompt)
    if (t < 0 || t >= vocab)
      throw Error("prompt token id " + std::to_string(t) + " outside the vocabulary [0, " + std::to_string(vocab) + ")");
  if (static_cast<int64_t>(prompt.size()) >= context)
    throw Error("prompt of " + std::to_string(prompt.size()) + " tokens does not fit the target's context of " +
                std::to_string(context) + " with room to generate");
}

}  // namespace splitspec

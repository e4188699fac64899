#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <thread>

#include "common/backend/registry.h"
#include "common/tokenizer/tokenizer.h"
#include "common/convert/gguf_convert.h"
#include "common/util/error.h"
#include "common/util/memory_usage.h"
#include "server/auth_gate.h"
#include "server/metrics_http.h"
#include "server/http/openai.h"
#include "server/service.h"

namespace splitspec {

Server::Server(ServerConfig config) : ctx_(std::make_unique<ServiceContext>()) {
  config.validate_for_start();
  ctx_->config = std::move(config);
  ctx_->target = open_backend(ctx_->config.target_dir,
                              {parse_device(ctx_->config.device), parse_kv_type(ctx_->config.kv_cache), std::nullopt});
  ctx_->numerics = ctx_->target->numerics();
  ctx_->device = ctx_->target->device();
  ctx_->kv_budget_bytes = ctx_->config.kv_budget_bytes;
  if (ctx_->kv_budget_bytes == 0) {
    if (const uint64_t device_free = ctx_->target->device_memory_free()) {
      // KV stores live on the device: three quarters of what it has left
      // with the weights loaded (the rest is the forward's work memory).
      ctx_->kv_budget_bytes = static_cast<int64_t>(device_free / 4 * 3);
    } else {
      // A mapped target's pages may not be resident yet: count its weights
      // as if they were.
      const uint64_t used = std::max<uint64_t>(memory_usage().rss_bytes, ctx_->target->weight_bytes());
      const uint64_t limit = memory_limit_bytes();
      ctx_->kv_budget_bytes = limit > used ? static_cast<int64_t>((limit - used) / 4 * 3) : 0;
    }
  }
  ctx_->model_name = std::filesystem::path(ctx_->config.target_dir).lexically_normal().filename().string();
  if (ctx_->model_name.empty())
    ctx_->model_name = std::filesystem::path(ctx_->config.target_dir).lexically_normal().parent_path().filename().string();
  if (tokenizer_available(ctx_->config.target_dir)) {
    ctx_->tokenizer_fingerprint = Tokenizer(ctx_->config.target_dir).fingerprint();
    // GetTokenizer's file, written once: a client with no tokenizer of its
    // own fetches it. A vocabulary that has no GGUF form leaves clients to
    // bring one (--tokenizer); the server serves on.
    const std::filesystem::path tmp = std::filesystem::temp_directory_path() /
                                      ("splitspec-vocab-" + std::to_string(::getpid()) + "-" +
                                       std::to_string(reinterpret_cast<uintptr_t>(this)) + ".gguf");
    try {
      const std::string fp = write_vocabulary_gguf(ctx_->config.target_dir, tmp.string());
      if (fp != ctx_->tokenizer_fingerprint)
        throw Error("its vocabulary as a GGUF file has fingerprint " + fp + ", not the target's " +
                    ctx_->tokenizer_fingerprint);
      std::ifstream in(tmp, std::ios::binary);
      ctx_->tokenizer_file.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } catch (const Error& e) {
      ctx_->tokenizer_file_error = e.what();
      spdlog::warn("event=tokenizer_not_served error=\"{}\"", e.what());
    }
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
  } else {
    spdlog::warn("{}: no tokenizer; clients are checked by vocabulary size only", ctx_->config.target_dir);
  }
  if (ctx_->config.early_exits == "auto") {
    std::optional<EarlyExits> all = EarlyExits::load(model_side_dir(ctx_->config.target_dir), ctx_->target->config());
    std::vector<int64_t> want = ctx_->config.early_exit_layers;
    if (want.empty() && all) want = all->serve_layers();
    if (all && !want.empty()) {
      EarlyExits chosen = *all;
      chosen.adapters().clear();
      for (int64_t l : want) {
        const int i = all->index_of(l);
        if (i < 0) throw Error("early_exit_layers: the target has no exit after layer " + std::to_string(l));
        chosen.adapters().push_back(all->adapters()[i]);
      }
      all = std::move(chosen);
    } else if (!all && !want.empty()) {
      throw Error("early_exit_layers given but " + ctx_->config.target_dir + " has no early_exits.json");
    }
    ctx_->exits = std::move(all);
    if (ctx_->exits) {
      ctx_->exits->set_shortlist(*ctx_->target, ctx_->config.early_exit_shortlist);
      if (ctx_->config.early_exit_shortlist > 0 && ctx_->exits->frequent_tokens().empty())
        spdlog::warn("{}: early exits carry no token ranking, so they score the whole vocabulary (slower); add one "
                     "with splitspec train shortlist",
                     ctx_->config.target_dir);
    }
  }
  ctx_->exit_priority = ctx_->config.early_exit_queue == "priority";
  // Re-read as often as the TLS files: both are Secrets rotated in place.
  if (!ctx_->config.auth_tokens_file.empty())
    ctx_->auth = TokenAuth::from_file(ctx_->config.auth_tokens_file, std::chrono::seconds(ctx_->config.tls_reload_s));
  service_ = std::make_unique<SplitSpecService>(*ctx_);
}

Server::~Server() {
  if (server_) shutdown();
}

namespace {

// The servers that are serving. A program that calls exit() with one of them
// still serving would have its reactors run, and log, while static destructors
// (spdlog's registry among them) take the process apart.
struct LiveServers {
  std::mutex mu;
  std::set<Server*> servers;
};
// Never destroyed: it is read at exit.
LiveServers& live_servers() {
  static auto* live = new LiveServers;
  return *live;
}

// Takes gRPC's reflection off one server (the health port). Its library
// registers it on every server built once the library is loaded, whatever
// this program asks, so a port that must not answer it drops the plugin
// (gRPC's own extension point for a builder's plugins).
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const auto& p) { return p->name() == "proto_server_reflection"; }),
                   plugins->end());
  }
};

std::string read_pem(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the " + std::string(what));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.find("-----BEGIN") == std::string::npos) throw Error(path + ": the " + std::string(what) + " is not PEM");
  return text;
}

// The main port's credentials: plaintext, or TLS from PEM files that gRPC's
// file watcher re-reads every tls_reload_s (a renewed certificate is served
// to new connections without a restart).
std::shared_ptr<grpc::ServerCredentials> server_credentials(const ServerConfig& c) {
  if (c.tls_cert.empty()) return grpc::InsecureServerCredentials();
  // The watcher takes unreadable files silently and serves nothing; check
  // them here so that a bad path fails the start with its name.
  read_pem(c.tls_cert, "TLS certificate");
  read_pem(c.tls_key, "TLS private key");
  if (!c.tls_client_ca.empty()) read_pem(c.tls_client_ca, "client CA certificate");
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      c.tls_key, c.tls_cert, c.tls_client_ca, static_cast<unsigned int>(c.tls_reload_s));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (c.tls_client_ca.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace

void Server::start() {
  spdlog::set_level(spdlog::level::from_str(ctx_->config.log_level));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  BatchingOptions batching;
  batching.enabled = ctx_->config.batching;
  batching.max_rows = ctx_->config.max_batch_rows;
  batching.wait_ms = ctx_->config.batch_wait_ms;
  ctx_->compute = std::make_unique<ComputeQueue>(ctx_->config.compute_threads, batching, ctx_->config.emulate_forward);
  grpc::ServerBuilder builder;
  // Bearer tokens and client certificate names are checked by the transport
  // before any handler runs, reflection's included (auth_gate.h).
  std::shared_ptr<grpc::ServerCredentials> credentials = server_credentials(ctx_->config);
  if (ctx_->auth || !ctx_->config.tls_client_names.empty())
    credentials = gated_credentials(ctx_->config.tls_cert.empty() ? nullptr : credentials, *ctx_);
  builder.AddListeningPort(ctx_->config.listen, credentials, &port_);
  builder.RegisterService(service_.get());
  // A sampled draft carries a distribution per token, up to 4 bytes for each
  // of the vocabulary's ids (a dense q): 16 tokens of a 152K vocabulary are
  // 9.7 MB, over gRPC's 4 MiB default. The limit is sized from the model.
  const int64_t draft_bytes =
      static_cast<int64_t>(ctx_->config.max_draft_tokens) * (ctx_->target->config().vocab_size * 4 + 64) + (64 << 10);
  const int64_t limit = std::max<int64_t>(ctx_->config.max_message_bytes, std::min<int64_t>(draft_bytes, INT32_MAX));
  if (limit > ctx_->config.max_message_bytes)
    spdlog::info("max_message_bytes raised to {} for {} sampled draft tokens of a {}-token vocabulary", limit,
                 ctx_->config.max_draft_tokens, ctx_->target->config().vocab_size);
  builder.SetMaxReceiveMessageSize(static_cast<int>(limit));
  // Clients ping to notice a dead server; allow it, and ping back so that a
  // client that vanished without closing its socket is noticed too.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  // HTTP/2 limits (deploy/README.md, gRPC 1.51's advisories): a ping flood
  // closes its connection, one connection holds a bounded number of
  // streams, and a connection with no stream does not hold a socket forever.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, ctx_->config.max_ping_strikes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, ctx_->config.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(ctx_->config.max_connection_idle_s * 1000));
  grpc::ResourceQuota quota("splitspec-server");
  quota.SetMaxThreads(ctx_->config.max_rpc_threads);
  builder.SetResourceQuota(quota);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    server_.reset();
    throw Error("cannot listen on " + ctx_->config.listen + " (address in use or invalid?)");
  }
  server_->GetHealthCheckService()->SetServingStatus(true);
  start_reaper();
  if (!ctx_->config.health_listen.empty()) {
    // Health alone, in plaintext: what Kubernetes' gRPC probes can reach
    // while the main port speaks TLS.
    grpc::ServerBuilder health;
    health.AddListeningPort(ctx_->config.health_listen, grpc::InsecureServerCredentials(), &health_port_);
    health.SetOption(std::make_unique<WithoutReflection>());
    // Every other method UNIMPLEMENTED, and a service for gRPC to poll (it
    // refuses to build a server with none besides its own health service).
    health_unknown_ = std::make_unique<grpc::CallbackGenericService>();
    health.RegisterCallbackGenericService(health_unknown_.get());
    health_server_ = health.BuildAndStart();
    if (!health_server_ || health_port_ == 0) {
      health_server_.reset();
      stop_reaper();
      server_->Shutdown(std::chrono::system_clock::now());
      server_.reset();
      throw Error("cannot listen on " + ctx_->config.health_listen + " for health (address in use or invalid?)");
    }
    health_server_->GetHealthCheckService()->SetServingStatus(true);
    spdlog::info("event=health listen={} port={}", ctx_->config.health_listen, health_port_);
  }
  if (!ctx_->config.http_listen.empty()) {
    // Its requests are Generate calls on an in-process channel: the same
    // loop, limits and metrics as gRPC's, without a socket or credentials
    // (the endpoint checks the bearer token itself and passes it on).
    try {
      http_ = std::make_unique<OpenAiHttp>(*ctx_, server_->InProcessChannel(grpc::ChannelArguments()));
    } catch (...) {
      stop(0);
      throw;
    }
    const ServerConfig& c = ctx_->config;
    spdlog::info("event=http listen={} port={} tls={} paths=/v1/models,/v1/completions,/v1/chat/completions",
                 c.http_listen, http_->port(),
                 c.http_tls == "upstream" ? "upstream" : (!http_->tls() ? "off" : (c.tls_client_ca.empty() ? "on" : "mutual")));
    if (c.http_tls == "upstream")
      spdlog::warn("event=http_tls_upstream listen={} note=\"the HTTP endpoint speaks plaintext: http_tls says TLS{} ends "
                   "in a proxy in front of it, which must not be reachable around\"",
                   c.http_listen, c.tls_client_ca.empty() ? "" : " and the client certificate check");
  }
  if (!ctx_->config.metrics_listen.empty()) {
    ServiceContext* ctx = ctx_.get();
    metrics_ = std::make_unique<MetricsHttpServer>(ctx_->config.metrics_listen, [ctx] { return collect_metrics(*ctx); });
    spdlog::info("event=metrics listen={} port={} path=/metrics", ctx_->config.metrics_listen, metrics_port());
  }
  {
    // Registered after spdlog's registry exists, so it runs before that is destroyed.
    static std::once_flag once;
    std::call_once(once, [] { std::atexit(stop_all_at_exit); });
    std::lock_guard<std::mutex> lock(live_servers().mu);
    live_servers().servers.insert(this);
  }
  const ModelConfig& c = ctx_->target->config();
  spdlog::info("event=serving listen={} port={} tls={} auth={} model={} layers={} vocab={} context={} max_sessions={} batching={} "
               "max_batch_rows={} batch_wait_ms={} draft_hint={} kv_cache={} kv_budget_bytes={} tokenizer={} weights={} "
               "weights_digest={} emulate_forward_ms={} device=\"{}\" backend={} arch={} kernels={}",
               ctx_->config.listen, port_,
               ctx_->config.tls_cert.empty() ? "off" : (ctx_->config.tls_client_ca.empty() ? "on" : "mutual"),
               ctx_->auth ? "token" : "none", ctx_->model_name, c.num_hidden_layers, c.vocab_size, c.max_position_embeddings,
               ctx_->config.max_sessions, ctx_->config.batching, ctx_->config.max_batch_rows, ctx_->config.batch_wait_ms,
               ctx_->config.draft_hint, ctx_->config.kv_cache, ctx_->kv_budget_bytes, ctx_->tokenizer_fingerprint.empty() ? "none" : ctx_->tokenizer_fingerprint,
               ctx_->numerics.weight_type, ctx_->numerics.weights_digest.empty() ? "none" : ctx_->numerics.weights_digest,
               ctx_->config.emulate_forward.spec(), ctx_->device, ctx_->numerics.backend, ctx_->numerics.arch,
               ctx_->numerics.kernels);
  if (ctx_->config.emulate_forward.enabled())
    spdlog::warn("event=emulation forward_ms={} note=\"target forwards are padded to FIXED + PER_ROW x rows ms; every "
                 "time this server reports is emulated\"",
                 ctx_->config.emulate_forward.spec());
  if (ctx_->exits) {
    std::vector<int64_t> layers;
    for (const ExitAdapter& a : ctx_->exits->adapters()) layers.push_back(a.after_layer);
    spdlog::info("event=early_exits after_layers={} queue={}", fmt::join(layers, ","), ctx_->config.early_exit_queue);
  }
}

void Server::stop_all_at_exit() {
  std::set<Server*> serving;
  {
    std::lock_guard<std::mutex> lock(live_servers().mu);
    serving.swap(live_servers().servers);
  }
  for (Server* s : serving) {
    spdlog::warn("event=exit_while_serving port={} active_sessions={}", s->port_, s->ctx_->counters.active_sessions.load());
    s->stop(0);
  }
}

void Server::shutdown() { stop(ctx_->config.shutdown_grace_s); }

void Server::stop(double grace_s) {
  if (!server_) return;
  {
    std::lock_guard<std::mutex> lock(live_servers().mu);
    live_servers().servers.erase(this);
  }
  spdlog::info("event=shutting_down active_sessions={} grace_s={}", ctx_->counters.active_sessions.load(), grace_s);
  // Drain first and stop listening last: while streams finish, health and
  // GetInfo still answer (NOT_SERVING), so load balancers see the change, and
  // new streams are refused with UNAVAILABLE.
  ctx_->serving = false;
  server_->GetHealthCheckService()->SetServingStatus(false);
  if (health_server_) health_server_->GetHealthCheckService()->SetServingStatus(false);
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (ctx_->live_streams.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const int32_t left = ctx_->live_streams.load();
  if (left > 0) spdlog::warn("event=grace_expired cancelling={}", left);
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  // Its requests in flight have just been cancelled with the calls they ran.
  http_.reset();
  if (health_server_) {
    health_server_->Shutdown(std::chrono::system_clock::now());
    health_server_->Wait();
    health_server_.reset();
  }
  stop_reaper();
  // /metrics reads the compute queue: it goes first.
  metrics_.reset();
  // Jobs still queued belong to cancelled streams; running them releases those.
  ctx_->compute.reset();
  server_.reset();
  spdlog::info("event=stopped sessions_total={} tokens_generated={}", ctx_->counters.sessions_total.load(),
               ctx_->counters.tokens_generated.load());
}

void Server::start_reaper() {
  const ServerConfig& c = ctx_->config;
  const double shortest = std::min(c.session_idle_timeout_s > 0 ? c.session_idle_timeout_s : 1e9,
                                   c.max_session_lifetime_s > 0 ? c.max_session_lifetime_s : 1e9);
  // A limit is enforced within a quarter of itself, at most a second late;
  // a lost device is noticed within half a second.
  const auto period =
      std::chrono::milliseconds(std::clamp<int64_t>(static_cast<int64_t>(std::min(shortest * 250, 500.0)), 50, 1000));
  reaper_stop_ = false;
  reaper_ = std::thread([this, period] {
    std::unique_lock<std::mutex> lock(reaper_mu_);
    while (!reaper_cv_.wait_for(lock, period, [this] { return reaper_stop_; })) {
      lock.unlock();
      enforce_session_limits(*ctx_);
      watch_device();
      lock.lock();
    }
  });
}

void Server::watch_device() {
  const std::string lost = ctx_->target->fatal_error();
  if (lost.empty()) return;
  {
    std::lock_guard<std::mutex> lock(ctx_->lost_mu);
    if (!ctx_->device_lost.empty()) return;
    ctx_->device_lost = lost;
  }
  spdlog::error("event=device_lost device=\"{}\" error=\"{}\" note=\"health is NOT_SERVING; clients fail over; restart the pod\"",
                ctx_->device, lost);
  server_->GetHealthCheckService()->SetServingStatus(false);
  if (health_server_) health_server_->GetHealthCheckService()->SetServingStatus(false);
}

void Server::stop_reaper() {
  if (!reaper_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(reaper_mu_);
    reaper_stop_ = true;
  }
  reaper_cv_.notify_all();
  reaper_.join();
}

int Server::metrics_port() const { return metrics_ ? metrics_->port() : 0; }
int Server::http_port() const { return http_ ? http_->port() : 0; }

std::string Server::metrics_text() const { return render_metrics(*ctx_); }

int32_t Server::active_sessions() const { return ctx_->counters.active_sessions.load(); }

}  // namespace splitspec

#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <thread>

#include "common/util/error.h"
#include "common/engine/tokenizer.h"
#include "server/metrics_http.h"
#include "server/service.h"

namespace splitspec {

Server::Server(ServerConfig config) : ctx_(std::make_unique<ServiceContext>()) {
  config.validate();
  if (config.target_dir.empty()) throw Error("no target model: give --target DIR (or \"target\" in the config file)");
  ctx_->config = std::move(config);
  ctx_->target = Model::load(ctx_->config.target_dir);
  ctx_->model_name = std::filesystem::path(ctx_->config.target_dir).lexically_normal().filename().string();
  if (ctx_->model_name.empty())
    ctx_->model_name = std::filesystem::path(ctx_->config.target_dir).lexically_normal().parent_path().filename().string();
  const auto tok_path = std::filesystem::path(ctx_->config.target_dir) / "tokenizer.model";
  if (std::filesystem::exists(tok_path)) {
    Tokenizer tok(tok_path.string());
    ctx_->tokenizer_fingerprint = tok.fingerprint();
  } else {
    spdlog::warn("{}: no tokenizer; clients are checked by vocabulary size only", tok_path.string());
  }
  if (ctx_->config.early_exits == "auto") {
    std::optional<EarlyExits> all = EarlyExits::load(ctx_->config.target_dir, ctx_->target->config());
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
  service_ = std::make_unique<SplitSpecService>(*ctx_);
}

Server::~Server() {
  if (server_) shutdown();
}

void Server::start() {
  spdlog::set_level(spdlog::level::from_str(ctx_->config.log_level));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  ctx_->compute = std::make_unique<ComputeQueue>(ctx_->config.compute_threads);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(ctx_->config.listen, grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(ctx_->config.max_message_bytes);
  // Clients ping to notice a dead server; allow it, and ping back so that a
  // client that vanished without closing its socket is noticed too.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    server_.reset();
    throw Error("cannot listen on " + ctx_->config.listen + " (address in use or invalid?)");
  }
  server_->GetHealthCheckService()->SetServingStatus(true);
  if (!ctx_->config.metrics_listen.empty()) {
    ServiceContext* ctx = ctx_.get();
    metrics_ = std::make_unique<MetricsHttpServer>(ctx_->config.metrics_listen, [ctx] { return render_metrics(*ctx); });
    spdlog::info("event=metrics listen={} port={} path=/metrics", ctx_->config.metrics_listen, metrics_->port());
  }
  const ModelConfig& c = ctx_->target->config();
  spdlog::info("event=serving listen={} port={} model={} layers={} vocab={} context={} max_sessions={} tokenizer={}",
               ctx_->config.listen, port_, ctx_->model_name, c.num_hidden_layers, c.vocab_size, c.max_position_embeddings,
               ctx_->config.max_sessions, ctx_->tokenizer_fingerprint.empty() ? "none" : ctx_->tokenizer_fingerprint);
  if (ctx_->exits) {
    std::vector<int64_t> layers;
    for (const ExitAdapter& a : ctx_->exits->adapters()) layers.push_back(a.after_layer);
    spdlog::info("event=early_exits after_layers={} queue={}", fmt::join(layers, ","), ctx_->config.early_exit_queue);
  }
}

void Server::shutdown() {
  if (!server_) return;
  spdlog::info("event=shutting_down active_sessions={} grace_s={}", ctx_->counters.active_sessions.load(),
               ctx_->config.shutdown_grace_s);
  // Drain first and stop listening last: while streams finish, health and
  // GetInfo still answer (NOT_SERVING), so load balancers see the change, and
  // new streams are refused with UNAVAILABLE.
  ctx_->serving = false;
  server_->GetHealthCheckService()->SetServingStatus(false);
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(ctx_->config.shutdown_grace_s * 1000));
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (ctx_->live_streams.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const int32_t left = ctx_->live_streams.load();
  if (left > 0) spdlog::warn("event=grace_expired cancelling={}", left);
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  // Jobs still queued belong to cancelled streams; running them releases those.
  ctx_->compute.reset();
  server_.reset();
  metrics_.reset();
  spdlog::info("event=stopped sessions_total={} tokens_generated={}", ctx_->counters.sessions_total.load(),
               ctx_->counters.tokens_generated.load());
}

int Server::metrics_port() const { return metrics_ ? metrics_->port() : 0; }

int32_t Server::active_sessions() const { return ctx_->counters.active_sessions.load(); }

}  // namespace splitspec

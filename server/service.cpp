#include "server/service.h"

#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>

#include <new>
#include <sstream>

#include "common/util/error.h"
#include "proto/convert.h"
#include "proto/status_name.h"
#include "server/generate_reactor.h"
#include "server/session_reactor.h"

namespace splitspec {

grpc::Status admit(ServiceContext& ctx, const std::string& identity) {
  if (!ctx.serving.load()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
  {
    std::lock_guard<std::mutex> lock(ctx.lost_mu);
    if (!ctx.device_lost.empty())
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server's device is lost (" + ctx.device_lost + ")");
  }
  const int32_t per_token = ctx.config.max_sessions_per_token;
  if (per_token > 0 && !identity.empty()) {
    std::lock_guard<std::mutex> lock(ctx.per_token_mu);
    int32_t& held = ctx.per_token[identity];
    if (held >= per_token) {
      ctx.counters.sessions_rejected.fetch_add(1);
      spdlog::warn("event=session_rejected token={} held={} max_sessions_per_token={}", identity, held, per_token);
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "this token already holds " + std::to_string(held) +
                              " open sessions, the server's max_sessions_per_token");
    }
    held += 1;
  }
  int32_t active = ctx.counters.active_sessions.load();
  do {
    if (active >= ctx.config.max_sessions) {
      if (per_token > 0 && !identity.empty()) {
        std::lock_guard<std::mutex> lock(ctx.per_token_mu);
        if (--ctx.per_token[identity] == 0) ctx.per_token.erase(identity);
      }
      ctx.counters.sessions_rejected.fetch_add(1);
      spdlog::warn("event=session_rejected active={} max_sessions={}", active, ctx.config.max_sessions);
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "the server is at its limit of " + std::to_string(ctx.config.max_sessions) + " sessions");
    }
  } while (!ctx.counters.active_sessions.compare_exchange_weak(active, active + 1));
  ctx.counters.sessions_total.fetch_add(1);
  ctx.live_streams.fetch_add(1);
  return grpc::Status::OK;
}

std::string token_identity(const ServiceContext& ctx, const grpc::ServerContextBase& context) {
  if (!ctx.auth) return "";
  const auto& md = context.client_metadata();
  const auto it = md.find("authorization");
  if (it == md.end()) return "";
  const std::optional<std::string> token = TokenAuth::bearer(std::string(it->second.data(), it->second.size()));
  return token ? TokenAuth::identity(*token) : "";
}

void leave(ServiceContext& ctx, const grpc::Status& status, const std::string& identity) {
  if (ctx.config.max_sessions_per_token > 0 && !identity.empty()) {
    std::lock_guard<std::mutex> lock(ctx.per_token_mu);
    if (--ctx.per_token[identity] <= 0) ctx.per_token.erase(identity);
  }
  ctx.counters.active_sessions.fetch_sub(1);
  const auto code = static_cast<size_t>(status.error_code());
  if (code < ctx.counters.finished_by_code.size()) ctx.counters.finished_by_code[code].fetch_add(1);
}

void retire(ServiceContext& ctx) { ctx.live_streams.fetch_sub(1); }

void note_slow_reader(ServiceContext& ctx, uint64_t session, const std::string& peer, size_t queued_bytes) {
  ctx.counters.slow_readers.fetch_add(1);
  spdlog::warn("session={} event=slow_reader peer={} queued_bytes={} max_send_queue_bytes={}", session, peer,
               queued_bytes, ctx.config.max_send_queue_bytes);
}

int32_t draft_hint(const ServiceContext& ctx) {
  const ServerConfig& c = ctx.config;
  if (c.draft_hint != "auto" || !c.batching) return 0;
  const int32_t sessions = std::max(1, ctx.counters.active_sessions.load());
  const int32_t share = std::max(1, c.max_batch_rows / sessions - 1);
  return share < c.max_draft_tokens ? share : 0;
}

KvAccount::~KvAccount() {
  counters_.kv_reserved_bytes.fetch_sub(reserved_);
  counters_.kv_cache_bytes.fetch_sub(held_);
}

bool KvAccount::reserve(int64_t bytes, int64_t budget) {
  int64_t used = counters_.kv_reserved_bytes.load();
  do {
    if (used + bytes > budget) return false;
  } while (!counters_.kv_reserved_bytes.compare_exchange_weak(used, used + bytes));
  reserved_ += bytes;
  return true;
}

void KvAccount::track(const TargetDecoder& decoder) {
  const int64_t now = static_cast<int64_t>(decoder.cache_bytes());
  counters_.kv_cache_bytes.fetch_add(now - held_);
  held_ = now;
}

grpc::Status start_decoder(ServiceContext& ctx, const v1::GenerationRequest& req,
                           std::unique_ptr<TargetDecoder>& decoder, KvAccount& account) {
  const int64_t vocab = ctx.target->config().vocab_size;
  if (req.vocab_size() != vocab)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "vocabulary mismatch: the client's vocab_size is " + std::to_string(req.vocab_size()) +
                            ", the server's target has " + std::to_string(vocab));
  const std::string& fingerprint = req.tokenizer_fingerprint();
  if (!fingerprint.empty() && !ctx.tokenizer_fingerprint.empty() && fingerprint != ctx.tokenizer_fingerprint)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "tokenizer mismatch: the client's tokenizer fingerprint is " + fingerprint + ", the server's is " +
                            ctx.tokenizer_fingerprint + " (draft and target must share one tokenizer)");
  if (req.max_new_tokens() < 0 || req.max_new_tokens() > ctx.config.max_new_tokens)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "max_new_tokens " + std::to_string(req.max_new_tokens()) + " outside the server's range [0, " +
                            std::to_string(ctx.config.max_new_tokens) + "]");
  GenerateOptions options;
  options.max_new_tokens = req.max_new_tokens();
  options.ignore_eos = req.ignore_eos();
  options.sampling = from_wire(req.sampling());
  try {
    decoder = std::make_unique<TargetDecoder>(*ctx.target, std::vector<int32_t>(req.prompt_ids().begin(), req.prompt_ids().end()),
                                              options, ctx.config.max_draft_tokens);
  } catch (const Error& e) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    // The stream gets its status now, not at the client's deadline.
    spdlog::error("event=open_out_of_memory prompt_tokens={} kv_cache={}", req.prompt_ids_size(), ctx.config.kv_cache);
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "the server has no memory for another session's KV cache (" +
                            std::to_string(req.prompt_ids_size()) + " prompt tokens)");
  }
  const int64_t need = static_cast<int64_t>(decoder->reserved_bytes());
  if (!account.reserve(need, ctx.kv_budget_bytes)) {
    decoder.reset();
    ctx.counters.kv_budget_refusals.fetch_add(1);
    const int64_t used = ctx.counters.kv_reserved_bytes.load();
    spdlog::warn("event=kv_budget_exhausted need_bytes={} reserved_bytes={} kv_budget_bytes={}", need, used,
                 ctx.kv_budget_bytes);
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "the session's KV cache (" + std::to_string(need) + " bytes for " +
                            std::to_string(req.prompt_ids_size()) + " prompt tokens, max_new_tokens " +
                            std::to_string(req.max_new_tokens()) + ") does not fit the server's kv_budget_bytes of " +
                            std::to_string(ctx.kv_budget_bytes) + " (" + std::to_string(used) +
                            " reserved by open sessions): retry later, or ask for fewer tokens");
  }
  account.track(*decoder);
  return grpc::Status::OK;
}

std::vector<prometheus::MetricFamily> collect_metrics(const ServiceContext& ctx) {
  using prometheus::MetricType;
  const ServerCounters& k = ctx.counters;
  std::vector<prometheus::MetricFamily> out;
  auto family = [&](const char* name, MetricType type, const char* help) -> prometheus::MetricFamily& {
    out.push_back(prometheus::MetricFamily{name, help, type, {}});
    return out.back();
  };
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    const bool counter = std::string(type) == "counter";
    prometheus::ClientMetric m;
    (counter ? m.counter.value : m.gauge.value) = value;
    family(name, counter ? MetricType::Counter : MetricType::Gauge, help).metric.push_back(std::move(m));
  };
  auto histogram = [&](const char* name, const char* help, const prometheus::Histogram& h) {
    family(name, MetricType::Histogram, help).metric.push_back(h.Collect());
  };
  const double proposed = static_cast<double>(k.draft_tokens_proposed.load());
  const double accepted = static_cast<double>(k.draft_tokens_accepted.load());
  metric("splitspec_spec_decode_num_draft_tokens_total", "counter", "Draft tokens received for verification.", proposed);
  metric("splitspec_spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.", accepted);
  metric("splitspec_spec_decode_draft_acceptance_rate", "gauge", "Accepted over received draft tokens, since start.",
         proposed > 0 ? accepted / proposed : 0.0);
  metric("splitspec_spec_decode_num_emitted_tokens_total", "counter", "Tokens committed, all modes.",
         static_cast<double>(k.tokens_generated.load()));
  metric("splitspec_spec_decode_rounds_total", "counter", "Verification rounds.", static_cast<double>(k.rounds_total.load()));
  metric("splitspec_spec_decode_early_verdicts_total", "counter", "Early-exit verdicts sent.",
         static_cast<double>(k.early_verdicts.load()));
  metric("splitspec_target_forwards_total", "counter", "Target forwards (rounds and autoregressive steps).",
         static_cast<double>(k.target_forwards.load()));
  metric("splitspec_active_sessions", "gauge", "Open Session and Generate streams.",
         static_cast<double>(k.active_sessions.load()));
  metric("splitspec_sessions_total", "counter", "Streams admitted.", static_cast<double>(k.sessions_total.load()));
  metric("splitspec_sessions_rejected_total", "counter", "Streams refused at the session limit.",
         static_cast<double>(k.sessions_rejected.load()));
  metric("splitspec_sessions_expired_total", "counter",
         "Session streams ended at session_idle_timeout_s or max_session_lifetime_s.",
         static_cast<double>(k.sessions_expired.load()));
  metric("splitspec_unauthenticated_requests_total", "counter", "RPCs refused for a missing or wrong bearer token.",
         static_cast<double>(k.unauthenticated.load()));
  metric("splitspec_invalid_requests_total", "counter", "Streams ended for malformed or incompatible requests.",
         static_cast<double>(k.invalid_requests.load()));
  {
    // Every code, zeros included, so that rate() sees a series from the start.
    prometheus::MetricFamily& f = family("splitspec_streams_finished_total", MetricType::Counter,
                                         "Admitted Session and Generate streams ended, by gRPC status code.");
    for (size_t c = 0; c < k.finished_by_code.size(); ++c) {
      prometheus::ClientMetric m;
      m.label.push_back({"code", code_name(static_cast<grpc::StatusCode>(c))});
      m.counter.value = static_cast<double>(k.finished_by_code[c].load());
      f.metric.push_back(std::move(m));
    }
  }
  {
    prometheus::MetricFamily& f = family("splitspec_http_requests_total", MetricType::Counter,
                                         "Requests the OpenAI endpoint answered, by status class.");
    for (size_t c = 0; c < k.http_by_class.size(); ++c) {
      prometheus::ClientMetric m;
      m.label.push_back({"code", std::to_string(c + 1) + "xx"});
      m.counter.value = static_cast<double>(k.http_by_class[c].load());
      f.metric.push_back(std::move(m));
    }
  }
  bool lost = false;
  {
    std::lock_guard<std::mutex> lock(ctx.lost_mu);
    lost = !ctx.device_lost.empty();
  }
  metric("splitspec_serving", "gauge", "1 while serving, 0 while shutting down or once the device is lost.",
         ctx.serving.load() && !lost ? 1.0 : 0.0);
  metric("splitspec_device_lost", "gauge", "1 once the target's device failed for good (a GPU's sticky error).",
         lost ? 1.0 : 0.0);
  {
    // What computes the target, as labels (vLLM's cache_config_info style).
    prometheus::MetricFamily& f = family("splitspec_backend_info", MetricType::Gauge,
                                         "The target's backend, its arithmetic, kernels, weights and device.");
    prometheus::ClientMetric m;
    m.label = {{"backend", ctx.numerics.backend},      {"arch", ctx.numerics.arch},
               {"kernels", ctx.numerics.kernels},      {"weight_type", ctx.numerics.weight_type},
               {"kv_cache", ctx.numerics.kv_type},     {"device", ctx.device}};
    m.gauge.value = 1;
    f.metric.push_back(std::move(m));
  }
  // Dashboards of an emulated run must not pass for real ones.
  metric("splitspec_emulated_forward_fixed_ms", "gauge",
         "--emulate-forward-ms FIXED: each forward takes at least this (0: real times).",
         ctx.config.emulate_forward.fixed_ms);
  metric("splitspec_emulated_forward_per_row_ms", "gauge", "--emulate-forward-ms PER_ROW: added per row of a forward.",
         ctx.config.emulate_forward.per_row_ms);
  metric("splitspec_kv_cache_bytes", "gauge", "KV cache memory held by open streams.",
         static_cast<double>(k.kv_cache_bytes.load()));
  metric("splitspec_kv_cache_reserved_bytes", "gauge",
         "KV cache memory the open streams may grow to, counted against kv_budget_bytes.",
         static_cast<double>(k.kv_reserved_bytes.load()));
  metric("splitspec_kv_cache_budget_bytes", "gauge", "The server's kv_budget_bytes in force.",
         static_cast<double>(ctx.kv_budget_bytes));
  metric("splitspec_slow_readers_closed_total", "counter",
         "Streams cancelled because their client did not read (max_send_queue_bytes).",
         static_cast<double>(k.slow_readers.load()));
  metric("splitspec_kv_budget_refusals_total", "counter", "Streams refused at Open because their KV cache would exceed kv_budget_bytes.",
         static_cast<double>(k.kv_budget_refusals.load()));
  // Per draft position, as vLLM's per-position acceptance: how often a round
  // drafted that deep, and how often the target accepted it.
  const int positions = std::min(ServerCounters::kPositions, ctx.config.max_draft_tokens);
  auto per_position = [&](const char* name, const char* help, const auto& counts) {
    prometheus::MetricFamily& f = family(name, MetricType::Counter, help);
    for (int i = 0; i < positions; ++i) {
      prometheus::ClientMetric m;
      m.label.push_back({"position", std::to_string(i + 1)});
      m.counter.value = static_cast<double>(counts[i].load());
      f.metric.push_back(std::move(m));
    }
  };
  per_position("splitspec_spec_decode_num_drafts_at_position_total", "Rounds whose draft reached this depth.",
               k.drafted_at);
  per_position("splitspec_spec_decode_num_accepted_at_position_total", "Rounds that accepted the draft at this depth.",
               k.accepted_at);
  if (ctx.compute) {
    const ComputeStats& c = ctx.compute->stats();
    metric("splitspec_num_waiting_rounds", "gauge", "Rounds queued for the target, not yet in a forward.",
           static_cast<double>(ctx.compute->waiting_rounds()));
    histogram("splitspec_round_queue_time_ms", "Milliseconds a round waited for its forward.", c.queue_ms);
    histogram("splitspec_batch_forward_time_ms",
              "Milliseconds of each batch: its target forward and its rounds' verification.", c.forward_ms);
    metric("splitspec_prefill_chunks_total", "counter", "Chunks of long prefills run between other sessions' rounds.",
           static_cast<double>(c.prefill_chunks.load()));
    histogram("splitspec_round_latency_ms", "Milliseconds from a round's arrival to its verdict.", c.round_ms);
    histogram("splitspec_batch_size_rounds", "Rounds and prefill chunks in one target forward.", c.batch_rounds);
    histogram("splitspec_batch_size_rows", "Rows (tokens) of one target forward.", c.batch_rows);
  }
  return out;
}

std::string render_metrics(const ServiceContext& ctx) {
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, collect_metrics(ctx));
  return text.str();
}

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>* SplitSpecService::Session(
    grpc::CallbackServerContext* context) {
  return new_session_reactor(ctx_, context);
}

grpc::ServerWriteReactor<v1::GenerateResponse>* SplitSpecService::Generate(grpc::CallbackServerContext* context,
                                                                          const v1::GenerationRequest* request) {
  return new_generate_reactor(ctx_, context, *request);
}

namespace {

// The vocabulary file in chunks well under any message limit, one write in
// flight at a time.
class TokenizerWriter final : public grpc::ServerWriteReactor<v1::TokenizerChunk> {
 public:
  explicit TokenizerWriter(const ServiceContext& ctx) : ctx_(ctx) {
    if (ctx_.tokenizer_file.empty()) {
      Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                          ctx_.tokenizer_file_error.empty() ? "the server's target ships no tokenizer"
                                                            : "the server cannot send its tokenizer: " +
                                                                  ctx_.tokenizer_file_error));
      return;
    }
    next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    next();
  }
  void OnDone() override { delete this; }

 private:
  static constexpr size_t kChunk = 256 * 1024;

  void next() {
    const std::string& file = ctx_.tokenizer_file;
    if (offset_ == file.size()) {
      Finish(grpc::Status::OK);
      return;
    }
    chunk_.Clear();
    if (offset_ == 0) {
      chunk_.set_fingerprint(ctx_.tokenizer_fingerprint);
      chunk_.set_total_bytes(file.size());
    }
    const size_t n = std::min(kChunk, file.size() - offset_);
    chunk_.set_data(file.data() + offset_, n);
    offset_ += n;
    StartWrite(&chunk_);
  }

  const ServiceContext& ctx_;
  v1::TokenizerChunk chunk_;
  size_t offset_ = 0;
};

}  // namespace

grpc::ServerWriteReactor<v1::TokenizerChunk>* SplitSpecService::GetTokenizer(grpc::CallbackServerContext*,
                                                                            const v1::GetTokenizerRequest*) {
  return new TokenizerWriter(ctx_);
}

grpc::ServerUnaryReactor* SplitSpecService::GetInfo(grpc::CallbackServerContext* context, const v1::GetInfoRequest*,
                                                    v1::ServerInfo* info) {
  const ModelConfig& c = ctx_.target->config();
  info->set_model_name(ctx_.model_name);
  info->set_vocab_size(static_cast<int32_t>(c.vocab_size));
  info->set_tokenizer_fingerprint(ctx_.tokenizer_fingerprint);
  info->set_max_context(static_cast<int32_t>(c.max_position_embeddings));
  info->set_max_draft_tokens(ctx_.config.max_draft_tokens);
  info->set_max_verdict_top_k(ctx_.config.max_verdict_top_k);
  info->set_kv_cache(kv_type_name(ctx_.target->kv_type()));
  info->set_weight_type(ctx_.numerics.weight_type);
  info->set_weights_digest(ctx_.numerics.weights_digest);
  info->set_backend(ctx_.numerics.backend);
  info->set_backend_arch(ctx_.numerics.arch);
  info->set_kernels_version(ctx_.numerics.kernels);
  info->set_device(ctx_.device);
  if (ctx_.config.emulate_forward.enabled()) info->set_emulated_forward_ms(ctx_.config.emulate_forward.spec());
  info->set_hidden_size(static_cast<int32_t>(ctx_.target->config().hidden_size));
  // The CPU backend sends them; a GPU does not yet.
  info->set_verdict_hidden_rows(ctx_.numerics.backend == "cpu");
  info->set_max_sessions(ctx_.config.max_sessions);
  info->set_version(SPLITSPEC_VERSION);
  {
    std::lock_guard<std::mutex> lock(ctx_.lost_mu);
    info->set_serving(ctx_.serving.load() && ctx_.device_lost.empty());
  }
  if (ctx_.exits)
    for (const ExitAdapter& a : ctx_.exits->adapters()) info->add_early_exit_layers(static_cast<int32_t>(a.after_layer));
  const ServerCounters& k = ctx_.counters;
  v1::ServerStats* s = info->mutable_stats();
  s->set_active_sessions(k.active_sessions.load());
  s->set_sessions_total(k.sessions_total.load());
  s->set_sessions_rejected(k.sessions_rejected.load());
  s->set_rounds_total(k.rounds_total.load());
  s->set_draft_tokens_proposed(k.draft_tokens_proposed.load());
  s->set_draft_tokens_accepted(k.draft_tokens_accepted.load());
  s->set_tokens_generated(k.tokens_generated.load());
  s->set_target_forwards(k.target_forwards.load());
  s->set_invalid_requests(k.invalid_requests.load());
  s->set_early_verdicts(k.early_verdicts.load());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace splitspec

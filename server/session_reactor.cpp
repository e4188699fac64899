#include "server/session_reactor.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>

#include "common/util/error.h"
#include "common/util/stopwatch.h"
#include "common/early_exit/early_verdict.h"
#include "common/decoding/target_decoder.h"
#include "proto/convert.h"
#include "proto/round_codec.h"
#include "server/log_text.h"
#include "server/stream_writer.h"

namespace splitspec {

namespace {

using Base = StreamWriter<grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>, v1::SessionResponse>;

grpc::Status invalid(const std::string& msg) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg); }

class SessionReactor final : public Base, public LimitedStream {
 public:
  SessionReactor(ServiceContext& ctx, grpc::CallbackServerContext* context, std::string identity)
      : ctx_(ctx), id_(ctx.next_session_id.fetch_add(1)), peer_(context->peer()), identity_(std::move(identity)) {
    {
      std::lock_guard<std::mutex> lock(ctx_.open_streams.mu);
      ctx_.open_streams.streams.insert(this);
    }
    bound_queue(context, static_cast<size_t>(ctx_.config.max_send_queue_bytes));
    StartRead(&in_);
  }

  void on_overflow(size_t bytes) override { note_slow_reader(ctx_, id_, peer_, bytes); }

  void enforce_limits(std::chrono::steady_clock::time_point now) override {
    const ServerConfig& c = ctx_.config;
    bool busy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy = busy_;
    }
    const double idle_s = std::chrono::duration<double>(now - last_active()).count();
    const double open_s = std::chrono::duration<double>(now - opened_).count();
    std::string why;
    if (!busy && c.session_idle_timeout_s > 0 && idle_s > c.session_idle_timeout_s)
      why = "the session sent nothing for " + seconds(idle_s) + " (the server's session_idle_timeout_s is " +
            seconds(c.session_idle_timeout_s) + ")";
    else if (c.max_session_lifetime_s > 0 && open_s > c.max_session_lifetime_s)
      why = "the session was open for " + seconds(open_s) + " (the server's max_session_lifetime_s is " +
            seconds(c.max_session_lifetime_s) + ")";
    if (why.empty()) return;
    spdlog::warn("session={} event=expired peer={} reason=\"{}\"", id_, peer_, why);
    ctx_.counters.sessions_expired.fetch_add(1);
    close(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, why));
  }
  void hold_stream() override { hold(); }
  void release_stream() override { release(); }

  ~SessionReactor() override {
    spdlog::info("session={} event=closed peer={} rounds={} generated={} proposed={} accepted={}", id_, peer_, rounds_,
                 decoder_ ? decoder_->generated() : 0, proposed_, accepted_);
    retire(ctx_);
  }

 private:
  void on_closed(const grpc::Status& status) override {
    {
      std::lock_guard<std::mutex> lock(ctx_.open_streams.mu);
      ctx_.open_streams.streams.erase(this);
    }
    leave(ctx_, status, identity_);
  }

  static std::string seconds(double s) { return fmt::format("{:.1f} s", s); }
  std::chrono::steady_clock::time_point last_active() const {
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(last_active_.load()));
  }
  void touch() { last_active_.store(std::chrono::steady_clock::now().time_since_epoch().count()); }

  void OnReadDone(bool ok) override {
    touch();
    if (!ok) {
      // The client half-closed (or vanished): let a round in flight finish.
      bool idle;
      {
        std::lock_guard<std::mutex> lock(mu_);
        client_closed_ = true;
        idle = !busy_;
      }
      if (idle) close(grpc::Status::OK);
      return;
    }
    if (in_.kind_case() == v1::SessionRequest::kCancel) {
      // The client's own choice, not a bad request.
      spdlog::info("session={} event=cancelled peer={}", id_, peer_);
      close(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
      return;
    }
    grpc::Status s = handle(in_);
    if (!s.ok()) {
      if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) ctx_.counters.invalid_requests.fetch_add(1);
      spdlog::warn("session={} event=rejected peer={} code={} error=\"{}\"", id_, peer_, static_cast<int>(s.error_code()),
                   log_text(s.error_message()));
      close(std::move(s));
      return;
    }
    if (!closing()) StartRead(&in_);
  }

  grpc::Status handle(const v1::SessionRequest& req) {
    switch (req.kind_case()) {
      case v1::SessionRequest::kOpen: return open(req.open());
      case v1::SessionRequest::kDraft: return draft(req.draft());
      default: return invalid("empty SessionRequest: set open, draft or cancel");
    }
  }

  grpc::Status open(const v1::GenerationRequest& o) {
    if (decoder_) return invalid("Open sent twice in one session");
    grpc::Status s = start_decoder(ctx_, o, decoder_, kv_);
    if (!s.ok()) return s;
    if (o.verdict_top_k() < 0 || o.verdict_top_k() > ctx_.config.max_verdict_top_k)
      return invalid("verdict_top_k " + std::to_string(o.verdict_top_k()) + " outside [0, " +
                     std::to_string(ctx_.config.max_verdict_top_k) + "] (the server's max_verdict_top_k)");
    sampling_ = from_wire(o.sampling());
    greedy_ = sampling_.greedy();
    early_ = o.early_verdicts() && ctx_.exits.has_value();
    extras_.top_k = o.verdict_top_k();
    extras_.hidden = o.verdict_hidden_state();
    extras_.hidden_rows = o.verdict_hidden_rows();
    extras_.hidden_row_layers.assign(o.verdict_hidden_row_layers().begin(), o.verdict_hidden_row_layers().end());
    const int64_t layers = ctx_.target->config().num_hidden_layers;
    for (int32_t l : extras_.hidden_row_layers)
      if (l < 1 || l > layers)
        return invalid("verdict_hidden_row_layers names layer " + std::to_string(l) + ", outside [1, " +
                       std::to_string(layers) + "]");
    if (extras_.hidden_row_layers.size() > 8) return invalid("verdict_hidden_row_layers names more than 8 layers");
    spdlog::info("session={} event=open peer={} prompt_tokens={} max_new_tokens={} temperature={}", id_, peer_,
                 o.prompt_ids_size(), o.max_new_tokens(), o.sampling().temperature());
    v1::SessionResponse r;
    v1::Opened* opened = r.mutable_opened();
    opened->set_session_id(std::to_string(id_));
    opened->set_max_draft_tokens(ctx_.config.max_draft_tokens);
    opened->set_context(static_cast<int32_t>(ctx_.target->config().max_position_embeddings));
    send(std::move(r));
    if (decoder_->finished()) close(grpc::Status::OK);  // max_new_tokens 0: nothing to do
    return grpc::Status::OK;
  }

  grpc::Status draft(const v1::Draft& d) {
    if (!decoder_) return invalid("Draft before Open");
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (busy_) return invalid("Draft for round " + std::to_string(d.round()) + " while round " + std::to_string(round_) + " is being verified");
    }
    if (decoder_->finished()) return invalid("Draft after the generation finished");
    if (d.round() != round_ + 1)
      return invalid("Draft for round " + std::to_string(d.round()) + ", expected round " + std::to_string(round_ + 1));
    if (d.tokens_size() > ctx_.config.max_draft_tokens)
      return invalid("Draft of " + std::to_string(d.tokens_size()) + " tokens exceeds the server's maximum of " +
                     std::to_string(ctx_.config.max_draft_tokens));
    DraftTree tree;
    try {
      tree = decode_draft(d, ctx_.target->config().vocab_size, greedy_);
      if (tree.size() > decoder_->room())
        throw Error("Draft of " + std::to_string(tree.size()) + " tokens does not fit the context (room for " +
                    std::to_string(decoder_->room()) + ")");
    } catch (const Error& e) {
      return invalid(e.what());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = true;
      round_ = d.round();
    }
    round_tokens_ = tree.size();
    round_depth_ = tree.max_depth();
    hold();
    RoundJob job;
    job.decoder = decoder_.get();
    job.tree = std::make_shared<const DraftTree>(std::move(tree));
    job.request.extras = extras_;
    const bool early = early_ && d.early_verdicts();
    if (early) tap_exits(job);
    job.wanted = [this] { return !cancelled() && !closing(); };
    job.done = [this](RoundVerified o) { finish(std::move(o)); };
    ctx_.compute->post_round(std::move(job));
    return grpc::Status::OK;
  }

  // On the compute worker, once the round is decided.
  void finish(RoundVerified o) {
    std::optional<v1::SessionResponse> out;
    std::optional<grpc::Status> end;
    if (o.result) {
      const RoundResult& r = *o.result;
      rounds_ += 1;
      proposed_ += round_tokens_;
      accepted_ += r.verdict.accepted;
      ServerCounters& c = ctx_.counters;
      c.rounds_total.fetch_add(1);
      c.target_forwards.fetch_add(1);
      c.draft_tokens_proposed.fetch_add(round_tokens_);
      c.draft_tokens_accepted.fetch_add(r.verdict.accepted);
      c.tokens_generated.fetch_add(static_cast<int64_t>(r.verdict.tokens.size()));
      c.record_acceptance(r.verdict.accepted, round_depth_);
      kv_.track(*decoder_);
      out.emplace();
      v1::RoundVerdict* v = out->mutable_verdict();
      v->set_round(round_);
      encode_verdict(r.verdict, *v);
      v->set_finish_reason(to_wire(r.finish));
      v->set_final(true);
      v->set_exit_layer(static_cast<int32_t>(ctx_.target->config().num_hidden_layers));
      encode_top_k(r.extras.top_k, *v);
      encode_hidden(r.extras.hidden, *v);
      encode_hidden_rows(r.extras.hidden_rows, *v);
      v->set_hidden_rows_from(r.extras.hidden_rows_from);
      v1::ServerTimings* t = v->mutable_timings();
      t->set_queue_ms(o.queue_ms);
      t->set_forward_ms(r.forward_ms);
      t->set_verify_ms(r.verify_ms);
      t->set_exits_ms(exits_ms_);
      t->set_batch_rounds(o.batch_rounds);
      spdlog::debug("session={} event=final_verdict round={} queue_ms={:.3f} forward_ms={:.3f} forward_end_ms={:.3f}", id_,
                    round_, o.queue_ms, r.forward_ms, o.queue_ms + r.forward_ms);
      v->set_draft_hint(draft_hint(ctx_));
      if (r.finish != FinishReason::kNone) end = grpc::Status::OK;
    } else if (!o.skipped) {
      if (o.invalid) {
        end = invalid(o.error);
      } else {
        spdlog::error("session={} event=internal_error error=\"{}\"", id_, log_text(o.error));
        end = grpc::Status(grpc::StatusCode::INTERNAL, o.error);
      }
    }
    bool half_closed;
    {
      // Idle again before the verdict leaves: the client answers it with the
      // next Draft, which must find the session ready.
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      half_closed = client_closed_;
    }
    touch();
    if (out) {
      // The round is decided: its early verdicts still queued are stale.
      if (early_) drop_queued([](const v1::SessionResponse& m) { return m.has_verdict() && !m.verdict().final(); });
      send(std::move(*out));
    }
    if (end) close(std::move(*end));
    if (half_closed) close(grpc::Status::OK);
    release();
  }

  // Taps the round's forward at the early exits: each exit verifies the draft
  // against its own logits and its verdict goes out while the forward
  // continues, unless the same tokens were already sent this round.
  void tap_exits(RoundJob& job) {
    const EarlyExits& exits = *ctx_.exits;
    for (const ExitAdapter& a : exits.adapters()) job.request.tap_layers.push_back(a.after_layer);
    sent_.clear();
    order_ = 0;
    exits_ms_ = 0;
    job.request.tap = [this, tree = job.tree, queued = job.queued](int64_t after, RowsView rows, const Rng& rng) {
      const EarlyExits& exits = *ctx_.exits;
      const auto t0 = SteadyClock::now();
      struct Timer {
        double& total;
        SteadyClock::time_point t0;
        ~Timer() { total += ms_since(t0); }
      } timer{exits_ms_, t0};
      const EarlyVerdict e =
          verify_at_exit(*ctx_.target, exits, exits.index_of(after), rows, *tree, sampling_, rng, extras_.hidden);
      for (const auto& tokens : sent_)
        if (tokens == e.verdict.tokens) return;
      sent_.push_back(e.verdict.tokens);
      v1::SessionResponse out;
      v1::RoundVerdict* v = out.mutable_verdict();
      v->set_round(round_);
      encode_verdict(e.verdict, *v);
      v->set_final(false);
      v->set_exit_layer(static_cast<int32_t>(after));
      v->set_confidence(e.confidence);
      encode_hidden(e.hidden, *v);
      ctx_.counters.early_verdicts.fetch_add(1);
      // When it left, against the final verdict's forward end (the same
      // clock): an early verdict is worth something only before that.
      spdlog::debug("session={} event=early_verdict round={} exit_layer={} since_queued_ms={:.3f}", id_, round_, after,
                    ms_since(queued));
      // FIFO: later exits rank below earlier ones, as they were produced.
      send(std::move(out), ctx_.exit_priority ? e.confidence : -static_cast<double>(++order_));
    };
  }

  ServiceContext& ctx_;
  const uint64_t id_;
  const std::string peer_;
  const std::string identity_;  // of the token the stream carried
  v1::SessionRequest in_;
  KvAccount kv_{ctx_.counters};
  std::unique_ptr<TargetDecoder> decoder_;  // touched by the reader until the first Draft, then by one job at a time
  bool greedy_ = true;
  bool early_ = false;  // early verdicts asked for and exits available
  ExtrasRequest extras_;  // what final verdicts carry beyond the verdict
  SamplingParams sampling_;
  uint32_t round_ = 0;  // the last round received
  bool busy_ = false;   // a round is queued or running
  bool client_closed_ = false;
  int64_t rounds_ = 0, proposed_ = 0, accepted_ = 0;
  int32_t round_tokens_ = 0;  // draft tokens of the round in flight
  int32_t round_depth_ = 0;   // and its longest branch
  // The round in flight's early verdicts: tokens already sent, send order,
  // time in the exits.
  std::vector<std::vector<int32_t>> sent_;
  uint64_t order_ = 0;
  double exits_ms_ = 0;
  // For the idle and lifetime limits: when the stream was admitted, and when
  // a message last came or a round last ended (steady-clock ticks).
  const std::chrono::steady_clock::time_point opened_ = std::chrono::steady_clock::now();
  std::atomic<std::chrono::steady_clock::rep> last_active_{opened_.time_since_epoch().count()};
};

// Refuses a stream before any message is read.
class RefusedSession final : public grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse> {
 public:
  explicit RefusedSession(const grpc::Status& s) { Finish(s); }
  void OnDone() override { delete this; }
};

}  // namespace

void enforce_session_limits(ServiceContext& ctx) {
  if (ctx.config.session_idle_timeout_s <= 0 && ctx.config.max_session_lifetime_s <= 0) return;
  // Held under the registry's lock (a registered stream is alive), ended
  // outside it: ending one takes that lock to leave the registry.
  std::vector<LimitedStream*> streams;
  {
    std::lock_guard<std::mutex> lock(ctx.open_streams.mu);
    for (LimitedStream* s : ctx.open_streams.streams) {
      s->hold_stream();
      streams.push_back(s);
    }
  }
  const auto now = std::chrono::steady_clock::now();
  for (LimitedStream* s : streams) {
    s->enforce_limits(now);
    s->release_stream();
  }
}

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>* new_session_reactor(
    ServiceContext& ctx, grpc::CallbackServerContext* context) {
  std::string identity = token_identity(ctx, *context);
  grpc::Status s = admit(ctx, identity);
  if (!s.ok()) return new RefusedSession(s);
  return new SessionReactor(ctx, context, std::move(identity));
}

}  // namespace splitspec

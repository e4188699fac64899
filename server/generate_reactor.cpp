#include "server/generate_reactor.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "common/decoding/target_decoder.h"
#include "proto/convert.h"
#include "server/log_text.h"
#include "server/stream_writer.h"

namespace splitspec {

namespace {

using Base = StreamWriter<grpc::ServerWriteReactor<v1::GenerateResponse>, v1::GenerateResponse>;

class GenerateReactor final : public Base {
 public:
  GenerateReactor(ServiceContext& ctx, grpc::CallbackServerContext* context, std::string identity,
                  std::unique_ptr<KvAccount> kv, std::unique_ptr<TargetDecoder> decoder)
      : ctx_(ctx),
        id_(ctx.next_session_id.fetch_add(1)),
        peer_(context->peer()),
        identity_(std::move(identity)),
        kv_(std::move(kv)),
        decoder_(std::move(decoder)) {
    spdlog::info("session={} event=generate peer={} prompt_tokens={}", id_, peer_, decoder_->sequence().size());
    // Admitted, said at once: a caller (the HTTP endpoint) can answer its
    // own client's status before the first token, where a refusal would
    // come as an error status instead.
    context->AddInitialMetadata(kAdmittedKey, "1");
    StartSendInitialMetadata();
    bound_queue(context, static_cast<size_t>(ctx_.config.max_send_queue_bytes));
    if (decoder_->finished()) {
      close(grpc::Status::OK);
      return;
    }
    post_step();
  }

  void on_overflow(size_t bytes) override { note_slow_reader(ctx_, id_, peer_, bytes); }

  ~GenerateReactor() override {
    spdlog::info("session={} event=closed peer={} generated={}", id_, peer_, decoder_->generated());
    retire(ctx_);
  }

 private:
  void on_closed(const grpc::Status& status) override { leave(ctx_, status, identity_); }

  // Each step is a round of an empty draft, so cloud-ar streams join the
  // batched forwards of the Session rounds (continuous batching).
  void post_step() {
    hold();
    RoundJob job;
    job.decoder = decoder_.get();
    job.wanted = [this] { return !cancelled() && !closing(); };
    job.done = [this](RoundVerified o) { stepped(std::move(o)); };
    ctx_.compute->post_round(std::move(job));
  }

  // On the compute worker.
  void stepped(RoundVerified o) {
    bool more = false;
    if (o.result) {
      const RoundResult& r = *o.result;
      ctx_.counters.target_forwards.fetch_add(1);
      ctx_.counters.tokens_generated.fetch_add(static_cast<int64_t>(r.verdict.tokens.size()));
      kv_->track(*decoder_);
      v1::GenerateResponse out;
      out.mutable_tokens()->Add(r.verdict.tokens.begin(), r.verdict.tokens.end());
      out.set_finish_reason(to_wire(r.finish));
      out.mutable_timings()->set_queue_ms(o.queue_ms);
      out.mutable_timings()->set_forward_ms(r.forward_ms);
      out.mutable_timings()->set_batch_rounds(o.batch_rounds);
      send(std::move(out));
      if (r.finish != FinishReason::kNone)
        close(grpc::Status::OK);
      else
        more = true;
    } else if (!o.skipped) {
      spdlog::error("session={} event=internal_error error=\"{}\"", id_, log_text(o.error));
      close(grpc::Status(grpc::StatusCode::INTERNAL, o.error));
    }
    // The next step queues behind other sessions' work.
    if (more) post_step();
    release();
  }

  ServiceContext& ctx_;
  const uint64_t id_;
  const std::string peer_;
  const std::string identity_;  // of the token the stream carried
  std::unique_ptr<KvAccount> kv_;
  std::unique_ptr<TargetDecoder> decoder_;  // only the (single, sequential) step jobs touch it
};

class RefusedGenerate final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit RefusedGenerate(const grpc::Status& s) { Finish(s); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerWriteReactor<v1::GenerateResponse>* new_generate_reactor(ServiceContext& ctx,
                                                                    grpc::CallbackServerContext* context,
                                                                    const v1::GenerationRequest& req) {
  auto kv = std::make_unique<KvAccount>(ctx.counters);
  std::unique_ptr<TargetDecoder> decoder;
  grpc::Status s = start_decoder(ctx, req, decoder, *kv);
  if (!s.ok()) {
    if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) ctx.counters.invalid_requests.fetch_add(1);
    return new RefusedGenerate(s);
  }
  std::string identity = token_identity(ctx, *context);
  s = admit(ctx, identity);
  if (!s.ok()) return new RefusedGenerate(s);
  return new GenerateReactor(ctx, context, std::move(identity), std::move(kv), std::move(decoder));
}

}  // namespace splitspec

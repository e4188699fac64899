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
  GenerateReactor(ServiceContext& ctx, grpc::CallbackServerContext* context, std::unique_ptr<TargetDecoder> decoder)
      : ctx_(ctx), id_(ctx.next_session_id.fetch_add(1)), peer_(context->peer()), decoder_(std::move(decoder)) {
    spdlog::info("session={} event=generate peer={} prompt_tokens={}", id_, peer_, decoder_->sequence().size());
    ctx_.counters.kv_cache_bytes.fetch_add(static_cast<int64_t>(decoder_->cache_bytes()));
    if (decoder_->finished()) {
      close(grpc::Status::OK);
      return;
    }
    post_step();
  }

  ~GenerateReactor() override {
    spdlog::info("session={} event=closed peer={} generated={}", id_, peer_, decoder_->generated());
    ctx_.counters.kv_cache_bytes.fetch_sub(static_cast<int64_t>(decoder_->cache_bytes()));
    retire(ctx_);
  }

 private:
  void on_closed(const grpc::Status& status) override { leave(ctx_, status); }

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
  if (grpc::Status a = authorize(ctx, *context); !a.ok()) return new RefusedGenerate(a);
  std::unique_ptr<TargetDecoder> decoder;
  grpc::Status s = start_decoder(ctx, req, decoder);
  if (!s.ok()) {
    ctx.counters.invalid_requests.fetch_add(1);
    return new RefusedGenerate(s);
  }
  s = admit(ctx);
  if (!s.ok()) return new RefusedGenerate(s);
  return new GenerateReactor(ctx, context, std::move(decoder));
}

}  // namespace splitspec

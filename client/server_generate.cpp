#include "client/server_generate.h"

#include <spdlog/spdlog.h>

#include <optional>

#include "client/reconnector.h"
#include "common/util/stopwatch.h"
#include "proto/convert.h"

namespace splitspec {

StreamedGeneration stream_generate(ServerLink& link, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                   int64_t vocab, const std::string& fingerprint, const StreamControl& control,
                                   const std::function<bool(int32_t)>& on_token) {
  const auto t0 = SteadyClock::now();
  const auto deadline = t0 + control.deadline;
  StreamedGeneration g;
  Reconnector again(link);
  again.start(control.reconnect_budget, deadline);
  std::optional<SteadyClock::time_point> last_message;
  const auto cancelled = [&] { return control.cancel && control.cancel->requested(); };
  while (true) {
    // Again from the tokens so far: every draw is keyed by its position, so
    // the server continues exactly where the broken call stopped.
    std::vector<int32_t> committed = prompt;
    committed.insert(committed.end(), g.ids.begin(), g.ids.end());
    GenerateOptions left = o;
    left.max_new_tokens -= static_cast<int32_t>(g.ids.size());
    const v1::GenerationRequest wire = generation_request(committed, left, vocab, fingerprint);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::duration_cast<std::chrono::system_clock::duration>(deadline - SteadyClock::now()));
    // A server-streaming read on the caller's thread: nothing else to overlap.
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = link.stub().Generate(&ctx, wire);
    v1::GenerateResponse msg;
    std::optional<int32_t> bad_id;
    bool stopped = false;
    // Ends before ctx does, whichever way this iteration ends.
    const Cancellation::Scope interrupt(control.cancel, [&ctx] { ctx.TryCancel(); });
    while (!bad_id && !stopped && reader->Read(&msg)) {
      const auto now = SteadyClock::now();
      if (g.ids.empty()) g.first_token_ms = ms_since(t0);
      else if (last_message && msg.tokens_size() > 0)
        g.token_ms.insert(g.token_ms.end(), static_cast<size_t>(msg.tokens_size()),
                          ms_between(*last_message, now) / static_cast<double>(msg.tokens_size()));
      if (msg.tokens_size() > 0) last_message = now;
      if (const auto broke = again.since()) {
        g.switch_ms += ms_since(*broke);
        again.answered();
      }
      for (int32_t id : msg.tokens()) {
        if (id < 0 || id >= vocab) {
          bad_id = id;
          break;
        }
        g.ids.push_back(id);
        if (on_token && !on_token(id)) {
          stopped = true;
          break;
        }
      }
      g.forwards += 1;
      g.forward_ms += msg.timings().forward_ms();
      if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) g.finish = from_wire(msg.finish_reason());
    }
    if (bad_id || stopped || cancelled()) ctx.TryCancel();
    const grpc::Status s = reader->Finish();
    if (bad_id)
      throw link.error("generated token " + std::to_string(*bad_id) + " outside the vocabulary [0, " +
                       std::to_string(vocab) + ")");
    if (stopped || cancelled()) {
      g.finish = FinishReason::kCancelled;
      break;
    }
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE && g.finish == FinishReason::kNone) {
      again.broke();
      if (again.reconnect(false, cancelled) && !cancelled()) {
        // Whatever answers now must be the target this generation began on:
        // another model would go on with its own tokens.
        link.check_same_target(std::chrono::milliseconds(5000));
        g.resumes += 1;
        spdlog::warn("server {}: Generate broke after {} tokens; calling again", link.address(), g.ids.size());
        continue;
      }
      if (cancelled()) {
        g.finish = FinishReason::kCancelled;
        break;
      }
    }
    if (!s.ok() && g.finish != FinishReason::kNone) {
      // Every token and the finish reason arrived: the generation is whole.
      spdlog::warn("server {}: Generate's stream ended badly after its last token ({}); keeping the {} tokens",
                   link.address(), s.error_message(), g.ids.size());
      break;
    }
    if (!s.ok()) throw link.error("Generate failed after " + std::to_string(g.ids.size()) + " tokens", s);
    break;
  }
  if (g.finish == FinishReason::kNone) {
    if (o.max_new_tokens != 0) throw link.error("Generate ended without a finish reason");
    g.finish = FinishReason::kLength;
  }
  g.wall_ms = ms_since(t0);
  return g;
}

}  // namespace splitspec

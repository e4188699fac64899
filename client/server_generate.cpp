#include "client/server_generate.h"

#include <optional>

#include "common/util/stopwatch.h"
#include "proto/convert.h"

namespace splitspec {

StreamedGeneration stream_generate(ServerLink& link, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                   int64_t vocab, const std::string& fingerprint, std::chrono::milliseconds deadline,
                                   const std::function<void(int32_t)>& on_token) {
  const auto t0 = SteadyClock::now();
  const v1::GenerationRequest wire = generation_request(prompt, o, vocab, fingerprint);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  // A server-streaming read on the caller's thread: nothing else to overlap.
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = link.stub().Generate(&ctx, wire);
  StreamedGeneration g;
  v1::GenerateResponse msg;
  std::optional<int32_t> bad_id;
  while (!bad_id && reader->Read(&msg)) {
    if (g.ids.empty()) g.first_token_ms = ms_since(t0);
    for (int32_t id : msg.tokens()) {
      if (id < 0 || id >= vocab) {
        bad_id = id;
        break;
      }
      g.ids.push_back(id);
      if (on_token) on_token(id);
    }
    g.forwards += 1;
    g.forward_ms += msg.timings().forward_ms();
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) g.finish = from_wire(msg.finish_reason());
  }
  if (bad_id) {
    ctx.TryCancel();
    reader->Finish();
    throw link.error("generated token " + std::to_string(*bad_id) + " outside the vocabulary [0, " +
                     std::to_string(vocab) + ")");
  }
  const grpc::Status s = reader->Finish();
  if (!s.ok()) throw link.error("Generate failed after " + std::to_string(g.ids.size()) + " tokens", s);
  if (g.finish == FinishReason::kNone) {
    if (o.max_new_tokens != 0) throw link.error("Generate ended without a finish reason");
    g.finish = FinishReason::kLength;
  }
  g.wall_ms = ms_since(t0);
  return g;
}

}  // namespace splitspec

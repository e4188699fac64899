#include "client/local_verifier.h"

#include <algorithm>
#include <chrono>

#include "common/backend/cpu_backend.h"
#include "common/util/error.h"

namespace splitspec {

LocalVerifier::LocalVerifier(std::shared_ptr<const Backend> target) : target_(std::move(target)) {}

void LocalVerifier::begin(const std::vector<int32_t>& prompt, const GenerateOptions& options, const ExtrasRequest& extras,
                          std::chrono::steady_clock::time_point, EarlyHandler) {
  decoder_ = std::make_unique<TargetDecoder>(*target_, prompt, options);
  extras_ = extras;
  stats_ = VerifierStats{};
  const StreamedWeights* stream = streamed_weights(*target_);
  stream_before_ = stream ? stream->stats() : StreamStats{};
}

bool LocalVerifier::finished() const { return decoder_->finished(); }

int32_t LocalVerifier::budget(int64_t length) const {
  // The round's forward holds the last committed token plus the tree.
  return static_cast<int32_t>(std::max<int64_t>(0, target_->config().max_position_embeddings - length));
}

RoundResult LocalVerifier::verify(const DraftTree& tree, bool) {
  // A long prompt is prefilled in chunks before its round: one forward of
  // every prompt token would hold activations for all of them at once (about
  // 200 KB a token at a 7B model's width), on the device whose memory local
  // mode is for. The kernels are batch-invariant, so the cache and the
  // round's logits are bitwise what one forward gives. A streamed target
  // reads its weights from disk once per forward, so it keeps one forward;
  // so does a round whose drafter reads the prompt's rows (a chunk's would
  // not reach it), as on a server.
  constexpr int64_t kPrefillChunk = 256;
  const bool rows = extras_.hidden_rows || !extras_.kv_row_layers.empty();
  double prefill_ms = 0;
  while (!streamed_weights(*target_) && !rows && decoder_->prefill_left() > 0 &&
         decoder_->round_rows(tree) > kPrefillChunk) {
    const auto t0 = std::chrono::steady_clock::now();
    TargetDecoder::verify_batch({}, {{decoder_.get(), std::min(kPrefillChunk, decoder_->prefill_left())}});
    prefill_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    stats_.target_forwards += 1;
  }
  TargetDecoder::RoundRequest request;
  request.extras = extras_;
  RoundResult r = decoder_->verify(tree, request);
  r.forward_ms += prefill_ms;
  stats_.target_forwards += 1;
  stats_.target_forward_ms += r.forward_ms;
  stats_.target_ms += r.forward_ms;
  return r;
}

std::function<bool()> LocalVerifier::spare_compute() const {
  const StreamedWeights* stream = streamed_weights(*target_);
  if (!stream) return {};
  return [stream] { return stream->forward_waiting(); };
}

VerifierStats LocalVerifier::stats() const {
  VerifierStats s = stats_;
  if (const StreamedWeights* stream = streamed_weights(*target_)) {
    const StreamStats now = stream->stats();
    s.weight_bytes_read = now.bytes_read - stream_before_.bytes_read;
    s.weight_memory_peak = now.peak_bytes;
    s.weight_stall_ms = now.stall_ms - stream_before_.stall_ms;
  }
  return s;
}

}  // namespace splitspec

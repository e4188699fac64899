#include "client/local_verifier.h"

#include <algorithm>

#include "common/util/error.h"

namespace splitspec {

LocalVerifier::LocalVerifier(std::shared_ptr<const Model> target) : target_(std::move(target)) {}

void LocalVerifier::begin(const std::vector<int32_t>& prompt, const GenerateOptions& options, const ExtrasRequest& extras,
                          std::chrono::steady_clock::time_point, EarlyHandler) {
  decoder_ = std::make_unique<TargetDecoder>(*target_, prompt, options);
  extras_ = extras;
  stats_ = VerifierStats{};
  stream_before_ = target_->stream() ? target_->stream()->stats() : StreamStats{};
}

bool LocalVerifier::finished() const { return decoder_->finished(); }

int32_t LocalVerifier::budget(int64_t length) const {
  // The round's forward holds the last committed token plus the tree.
  return static_cast<int32_t>(std::max<int64_t>(0, target_->config().max_position_embeddings - length));
}

RoundResult LocalVerifier::verify(const DraftTree& tree, bool) {
  TargetDecoder::RoundRequest request;
  request.extras = extras_;
  RoundResult r = decoder_->verify(tree, request);
  stats_.forwards += 1;
  stats_.forward_ms += r.forward_ms;
  return r;
}

std::function<bool()> LocalVerifier::spare_compute() const {
  const StreamedWeights* stream = target_->stream();
  if (!stream) return {};
  return [stream] { return stream->forward_waiting(); };
}

VerifierStats LocalVerifier::stats() const {
  VerifierStats s = stats_;
  if (const StreamedWeights* stream = target_->stream()) {
    const StreamStats now = stream->stats();
    s.weight_bytes_read = now.bytes_read - stream_before_.bytes_read;
    s.weight_memory_peak = now.peak_bytes;
    s.weight_stall_ms = now.stall_ms - stream_before_.stall_ms;
  }
  return s;
}

}  // namespace splitspec

#pragma once
// `local`: the target on this device, in memory or streamed from disk under a
// memory budget (EdgeLLM's setting), verifying each round in one forward.
#include <memory>

#include "client/verifier.h"
#include "common/backend/backend.h"

namespace splitspec {

class LocalVerifier final : public Verifier {
 public:
  explicit LocalVerifier(std::shared_ptr<const Backend> target);

  std::string name() const override { return "local"; }
  void begin(const std::vector<int32_t>& prompt, const GenerateOptions& options, const ExtrasRequest& extras,
             std::chrono::steady_clock::time_point deadline, EarlyHandler on_early) override;
  bool finished() const override;
  int32_t budget(int64_t length) const override;
  RoundResult verify(const DraftTree& tree, bool early) override;
  // Frees the KV cache (a fallback the generation has left).
  void abort() override { decoder_.reset(); }
  // A streamed target's forward waits for weights at times: the drafter may
  // work then.
  std::function<bool()> spare_compute() const override;
  VerifierStats stats() const override;

 private:
  std::shared_ptr<const Backend> target_;
  std::unique_ptr<TargetDecoder> decoder_;
  ExtrasRequest extras_;
  VerifierStats stats_;
  StreamStats stream_before_;  // a streamed target's counters when the generation began
};

}  // namespace splitspec

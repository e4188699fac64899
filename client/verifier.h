#pragma once
// The target's side of a round, wherever the target runs: `local`
// (LocalVerifier: a TargetDecoder over an in-memory or disk-streamed target
// on this device) or `server` (ServerVerifier: a Session stream to
// splitspec-server). The round loop (round_loop.h) runs any drafter against
// either; both commit and stop exactly as the target alone would.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "client/client_stats.h"
#include "common/decoding/generate_options.h"
#include "common/decoding/target_decoder.h"
#include "common/util/error.h"

namespace splitspec {

// The target went away mid-generation (a broken stream, a round past its
// timeout): nothing is lost but the round, which may be verified again from
// the committed tokens, on a new session or by another verifier.
class VerifierUnavailable : public Error {
 public:
  using Error::Error;
};

// A verdict predicted while its round is verified (the server's early exits):
// what pre-drafting drafts from. Only the final verdict decides.
struct PredictedVerdict {
  uint32_t round = 0;
  Verdict verdict;
  double confidence = 0;   // how likely it is the final one
  int32_t exit_layer = 0;  // the layers behind it
  std::vector<float> hidden;  // the exit's final hidden state, when the drafter wants the target's
};

// What a verifier measured, in the public Stats' parts and their names
// (client_stats.h): the target's forwards (the local verifier's also as
// target_ms, the server's as server_forward_ms) and the link. A generation's
// Stats takes them as they are.
struct VerifierStats : TargetStats, LinkStats {};

class Verifier {
 public:
  // Called on another thread, as early verdicts arrive; checked first.
  using EarlyHandler = std::function<void(const PredictedVerdict&)>;

  virtual ~Verifier() = default;
  virtual std::string name() const = 0;

  // Starts a generation: `extras` are what the drafter wants with each final
  // verdict; `on_early` receives early verdicts of rounds that ask for them.
  // Throws splitspec::Error for a prompt or options the target refuses.
  virtual void begin(const std::vector<int32_t>& prompt, const GenerateOptions& options, const ExtrasRequest& extras,
                     std::chrono::steady_clock::time_point deadline, EarlyHandler on_early) = 0;
  // True before any round when there is nothing to generate (max_new_tokens 0).
  virtual bool finished() const = 0;
  // Most nodes a round may carry once the committed sequence is `length`
  // tokens long (the context's room; a server's limit per round).
  virtual int32_t budget(int64_t length) const = 0;
  // Verifies one round; `early`: stream its early verdicts to the handler.
  // The result's tokens are cut at the first stop (EOS, length, context).
  virtual RoundResult verify(const DraftTree& tree, bool early) = 0;
  // Ends the generation; throws if the target's side ended it badly.
  virtual void end() {}
  // Gives the generation up (an error elsewhere), freeing at once what it
  // holds, such as a server's session.
  virtual void abort() {}
  // From any thread: a verify() waiting on another machine returns at once
  // by throwing. A local round is short, so the default waits it out.
  virtual void interrupt() {}

  // Whether rounds can stream early verdicts at all.
  virtual bool early_verdicts() const { return false; }
  // While verify() runs: whether this device has compute to spare for a
  // drafter working in the background (null: never).
  virtual std::function<bool()> spare_compute() const { return {}; }
  // Of the current generation.
  virtual VerifierStats stats() const = 0;
};

}  // namespace splitspec

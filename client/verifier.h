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

struct VerifierStats {
  int64_t forwards = 0;    // target forwards: one a round
  double forward_ms = 0;   // of the target forwards (server: as it reports them)
  double wait_ms = 0;      // from sending each round to its verdict (server)
  double server_ms = 0;    // of that, the server's own: queue, forward, verify
  double exits_ms = 0;     // of forward_ms: early exits
  int64_t verdict_bytes = 0;  // final verdicts as serialized (server)
  int64_t draft_bytes = 0;    // drafts sent upstream as serialized (server)
  int64_t top_k_bytes = 0;    // of those, the top K asked for (server)
  int64_t hidden_bytes = 0;   // of those, the hidden state asked for (server)
  // A target streamed from disk (local).
  uint64_t weight_bytes_read = 0;
  uint64_t weight_memory_peak = 0;
  double weight_stall_ms = 0;
};

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

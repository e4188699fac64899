#pragma once
// `server`: each round goes to splitspec-server over one Session stream per
// generation, as a chain or a token tree; the verdict comes back with the
// accepted path. Early verdicts, when a round asks for them, go to the
// handler on gRPC's thread the moment they arrive. Every verdict is checked
// against the round's tree before anything uses it.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "client/server_link.h"
#include "client/session_stream.h"
#include "client/verifier.h"

namespace splitspec {

class ServerVerifier final : public Verifier {
 public:
  // `vocab` and `tokenizer_fingerprint` (empty: none) are the client's, for
  // the server to check against its target's.
  ServerVerifier(ServerLink& link, int64_t vocab, std::string tokenizer_fingerprint);
  ~ServerVerifier() override;

  std::string name() const override { return "server"; }
  void begin(const std::vector<int32_t>& prompt, const GenerateOptions& options, const ExtrasRequest& extras,
             std::chrono::steady_clock::time_point deadline, EarlyHandler on_early) override;
  bool finished() const override { return finished_; }
  int32_t budget(int64_t length) const override;
  RoundResult verify(const DraftTree& tree, bool early) override;
  void end() override;
  void abort() override { reset_stream(); }
  void interrupt() override;
  bool early_verdicts() const override { return !link_.info().early_exit_layers().empty(); }
  VerifierStats stats() const override { return stats_; }
  // A round with no verdict after this long throws VerifierUnavailable (0: never).
  void set_round_timeout(std::chrono::milliseconds t) { round_timeout_ = t; }

 private:
  void reset_stream(std::unique_ptr<SessionStream> next = nullptr);
  // Checks an early verdict on gRPC's thread; false ends the call.
  bool check_early(const v1::RoundVerdict& v);
  // Throws once the stream went wrong: a malformed early verdict if that is
  // what ended it, else the call's status; VerifierUnavailable when the
  // server or the network went away.
  [[noreturn]] void fail(const std::string& what);

  ServerLink& link_;
  const int64_t vocab_;
  const std::string fingerprint_;
  std::unique_ptr<SessionStream> stream_;
  std::mutex stream_mu_;  // replacing stream_ against interrupt() on another thread
  std::chrono::milliseconds round_timeout_{0};
  EarlyHandler handler_;
  bool greedy_ = true;
  bool finished_ = false;
  bool want_extras_ = false;
  bool want_hidden_ = false;
  bool want_rows_ = false;  // hidden rows (a model's own MTP head)
  int64_t row_layers_ = 0;  // layers in each of them (0: the final hidden state)
  uint32_t round_ = 0;
  // The last final verdict's draft_hint (0: none): budget() keeps to it, and
  // pre-drafting threads ask budget() too.
  std::atomic<int32_t> hint_{0};
  VerifierStats stats_;
  // Shared with gRPC's thread.
  std::mutex mu_;
  DraftTree shape_;  // the open round's tree, without q
  uint32_t shape_round_ = 0;
  uint32_t early_round_ = 0;  // gRPC's reads are sequential: counted there only
  int early_in_round_ = 0;
  std::string early_error_;  // the first malformed early verdict: it ended the call
};

}  // namespace splitspec

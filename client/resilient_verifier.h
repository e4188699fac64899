#pragma once
// The server verifier as a robot needs it: a generation survives its server.
// When a round's stream breaks, the round is verified again from exactly the
// committed tokens: on a new session once the server is back (within the
// reconnect budget), or, with a fallback target, by the local verifier at
// once; while local, the server's health is watched, and the first round
// after it says SERVING goes back to it. The drafter never notices. Every
// random draw is keyed by the seed and the position (Rng::keyed), so a
// generation that moved produces the tokens of one that did not.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "client/client_stats.h"
#include "client/reconnector.h"
#include "client/server_link.h"
#include "client/server_verifier.h"
#include "client/verifier.h"

namespace splitspec {


class ResilientVerifier final : public Verifier {
 public:
  // `fallback` may be null (reconnect only); `reconnect_budget` 0: no
  // reconnecting. With a fallback a break goes local at once when the server
  // refuses connections, and waits for a silent one at most
  // `failback_interval` (and the budget): a robot keeps moving, and the
  // health watch brings it back.
  ResilientVerifier(ServerLink& link, std::unique_ptr<ServerVerifier> server, std::unique_ptr<Verifier> fallback,
                    std::chrono::milliseconds reconnect_budget, std::chrono::milliseconds failback_interval);
  ~ResilientVerifier() override;

  std::string name() const override { return "server"; }
  void begin(const std::vector<int32_t>& prompt, const GenerateOptions& options, const ExtrasRequest& extras,
             std::chrono::steady_clock::time_point deadline, EarlyHandler on_early) override;
  bool finished() const override { return server_->finished(); }
  // What both sides can take: a round drafted here may be verified by either.
  int32_t budget(int64_t length) const override;
  RoundResult verify(const DraftTree& tree, bool early) override;
  void end() override;
  void abort() override;
  void interrupt() override;
  bool early_verdicts() const override { return server_->early_verdicts(); }
  std::function<bool()> spare_compute() const override;
  VerifierStats stats() const override;

  void set_round_timeout(std::chrono::milliseconds t) { server_->set_round_timeout(t); }
  const FaultStats& fault_stats() const { return faults_; }

 private:
  // The same generation, from its committed tokens, on `v`.
  void restart_on(Verifier& v, bool early);
  // After a break: the server back within the window and this generation
  // started on it again (true), or not.
  bool reconnect();
  void to_fallback();
  void to_server_if_serving();
  // Whether the rest of the generation, at the server's measured pace,
  // would end after the deadline.
  bool server_would_miss_deadline() const;
  // `wait_first`: after a server refused to take the generation over, ask
  // again only a failback interval later.
  void start_watch(bool wait_first = false);
  void stop_watch();
  void bank(const Verifier& v);
  // How long a break waits for the server to be back.
  std::chrono::milliseconds window() const {
    return fallback_ ? std::min(reconnect_budget_, failback_interval_) : reconnect_budget_;
  }

  ServerLink& link_;
  std::unique_ptr<ServerVerifier> server_;
  std::unique_ptr<Verifier> fallback_;
  const std::chrono::milliseconds reconnect_budget_;
  const std::chrono::milliseconds failback_interval_;
  std::atomic<Verifier*> active_{nullptr};  // read by the drafter's thread (spare_compute)
  bool fallback_used_ = false;
  bool failing_back_ = false;  // on the server again, no round verified there yet
  // The generation as begun, and what it has committed since.
  std::vector<int32_t> prompt_;
  std::vector<int32_t> generated_;
  GenerateOptions options_;
  ExtrasRequest extras_;
  std::chrono::steady_clock::time_point deadline_;
  EarlyHandler on_early_;
  std::atomic<bool> interrupted_{false};
  Reconnector reconnector_{link_};
  FaultStats faults_;
  // The server's pace this generation: rounds verified there in a row, and
  // the time and tokens of those after the first.
  struct Pace {
    int64_t server_rounds = 0;
    double server_ms = 0;
    int64_t server_tokens = 0;
  } pace_;
  bool for_deadline_ = false;  // on the fallback to make the deadline: no failback
  VerifierStats banked_;  // of sessions that ended
  // The health watch while on the fallback.
  std::thread watch_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
  std::atomic<bool> serving_{false};
};

}  // namespace splitspec

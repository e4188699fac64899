#pragma once
// The splitspec.v1.SplitSpec service: Session (speculative rounds), Generate
// (cloud-only autoregressive) and GetInfo, on gRPC's callback API so that an
// idle stream costs no thread. Target forwards run on the ComputeQueue.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <prometheus/metric_family.h>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "common/backend/backend.h"
#include "common/decoding/target_decoder.h"
#include "common/early_exit/early_exit.h"
#include "proto/splitspec.grpc.pb.h"
#include "server/compute_queue.h"
#include "server/failed_tokens.h"
#include "server/server_config.h"
#include "server/token_auth.h"

namespace splitspec {

// Counters behind GetInfo's ServerStats.
struct ServerCounters {
  std::atomic<int32_t> active_sessions{0};
  std::atomic<int64_t> sessions_total{0};
  std::atomic<int64_t> sessions_rejected{0};
  std::atomic<int64_t> sessions_expired{0};  // ended at the idle or lifetime limit
  std::atomic<int64_t> rounds_total{0};
  std::atomic<int64_t> draft_tokens_proposed{0};
  std::atomic<int64_t> draft_tokens_accepted{0};
  std::atomic<int64_t> tokens_generated{0};
  std::atomic<int64_t> target_forwards{0};
  std::atomic<int64_t> invalid_requests{0};
  std::atomic<int64_t> early_verdicts{0};
  std::atomic<int64_t> unauthenticated{0};
  std::atomic<int64_t> kv_cache_bytes{0};     // held by the open streams' decoders now
  std::atomic<int64_t> kv_reserved_bytes{0};  // the most they may grow to (against kv_budget_bytes)
  std::atomic<int64_t> kv_budget_refusals{0};
  std::atomic<int64_t> slow_readers{0};  // streams cancelled at max_send_queue_bytes
  // Admitted streams by the gRPC status they ended with (OK at 0).
  std::array<std::atomic<int64_t>, 17> finished_by_code{};
  // The HTTP endpoint's responses by status class (1xx at 0 ... 5xx at 4).
  std::array<std::atomic<int64_t>, 5> http_by_class{};
  // Per draft position (depth 1 at index 0): rounds whose draft reached it,
  // and rounds that accepted it. Deeper positions are counted at the last.
  static constexpr int kPositions = 32;
  std::array<std::atomic<int64_t>, kPositions> drafted_at{};
  std::array<std::atomic<int64_t>, kPositions> accepted_at{};
  void record_acceptance(int32_t accepted, int32_t depth) {
    for (int32_t i = 0; i < depth; ++i) drafted_at[std::min(i, kPositions - 1)].fetch_add(1);
    for (int32_t i = 0; i < accepted; ++i) accepted_at[std::min(i, kPositions - 1)].fetch_add(1);
  }
};

// Everything a stream needs from the server, shared by all of them.
struct ServiceContext;

// A Session stream as the limits on idle time and lifetime see it.
class LimitedStream {
 public:
  // Ends the stream with DEADLINE_EXCEEDED if it is over a limit at `now`.
  virtual void enforce_limits(std::chrono::steady_clock::time_point now) = 0;
  // Keep the stream's object alive across enforce_limits (StreamWriter's).
  virtual void hold_stream() = 0;
  virtual void release_stream() = 0;

 protected:
  ~LimitedStream() = default;
};

// The open Session streams: each registers when admitted and leaves when
// its end is decided, so a registered stream is alive.
struct OpenStreams {
  std::mutex mu;
  std::unordered_set<LimitedStream*> streams;
};

// Ends the open Session streams over session_idle_timeout_s or
// max_session_lifetime_s (the server calls it a few times a second).
void enforce_session_limits(ServiceContext& ctx);

struct ServiceContext {
  ServerConfig config;
  int64_t kv_budget_bytes = 0;  // in force: config.kv_budget_bytes, or what 0 there stands for
  std::shared_ptr<const Backend> target;
  std::string model_name;
  std::string tokenizer_fingerprint;  // empty: the target ships no tokenizer
  // The target's vocabulary as a vocabulary-only GGUF file (GetTokenizer);
  // empty without one, or with why it could not be written.
  std::string tokenizer_file;
  std::string tokenizer_file_error;
  Numerics numerics;                  // the target's, once at start (its digest reads every weight)
  std::string device;                 // Backend::device()
  std::optional<EarlyExits> exits;    // the active early exits, when any
  std::unique_ptr<TokenAuth> auth;    // bearer tokens every RPC must carry, when configured
  FailedTokens failed_tokens;         // the HTTP door's delay for peers guessing tokens
  bool exit_priority = true;          // early verdicts go out most confident first (else FIFO)
  ServerCounters counters;
  std::atomic<bool> serving{true};
  // Set once the target's device is lost (Backend::fatal_error): streams are
  // refused, health says NOT_SERVING, so clients and load balancers move on.
  mutable std::mutex lost_mu;
  std::string device_lost;
  std::unique_ptr<ComputeQueue> compute;
  std::atomic<uint64_t> next_session_id{1};
  // Streams whose reactor still exists: a stream leaves the session count
  // when its end is decided, and this one when it is gone (shutdown drains it).
  std::atomic<int32_t> live_streams{0};
  OpenStreams open_streams;
  // Open streams by token identity, for max_sessions_per_token.
  std::mutex per_token_mu;
  std::map<std::string, int32_t> per_token;
};

class SplitSpecService final : public v1::SplitSpec::CallbackService {
 public:
  explicit SplitSpecService(ServiceContext& ctx) : ctx_(ctx) {}

  grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>* Session(grpc::CallbackServerContext* context) override;
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* context,
                                                          const v1::GenerationRequest* request) override;
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context, const v1::GetInfoRequest* request,
                                    v1::ServerInfo* response) override;
  grpc::ServerWriteReactor<v1::TokenizerChunk>* GetTokenizer(grpc::CallbackServerContext* context,
                                                            const v1::GetTokenizerRequest* request) override;

 private:
  ServiceContext& ctx_;
};

// Admission of a new stream of the token named `identity` (empty without
// tokens): OK and the session counted, or the status to refuse it with
// (UNAVAILABLE while shutting down, RESOURCE_EXHAUSTED at max_sessions or
// max_sessions_per_token). A counted session calls leave() once its end is
// decided (before its client can learn it, so a client that starts its
// next generation at once finds the slot free), with the status it ends
// with, and retire() when its reactor is destroyed.
grpc::Status admit(ServiceContext& ctx, const std::string& identity);
// TokenAuth::identity of the token the call carried (the transport checked
// it before any handler ran: auth_gate.h); empty when tokens are off.
std::string token_identity(const ServiceContext& ctx, const grpc::ServerContextBase& context);
void leave(ServiceContext& ctx, const grpc::Status& status, const std::string& identity);
void retire(ServiceContext& ctx);
// Counts and logs a stream cancelled at max_send_queue_bytes.
void note_slow_reader(ServiceContext& ctx, uint64_t session, const std::string& peer, size_t queued_bytes);

// The counters and histograms as Prometheus metric families, names in the
// style of vLLM's spec_decode_* metrics; and the same in the text format.
std::vector<prometheus::MetricFamily> collect_metrics(const ServiceContext& ctx);
std::string render_metrics(const ServiceContext& ctx);

// Checks a request against the target and the server's limits and starts
// its decoder. FAILED_PRECONDITION when vocabulary or tokenizer differ from
// the target's; INVALID_ARGUMENT for a bad prompt or options.
// The draft length a final verdict advises under the current load (0: no
// advice): the forward's row budget shared by the open sessions, one row of
// each being the round's last committed token.
int32_t draft_hint(const ServiceContext& ctx);

// A stream's share of the KV budget and of the kv_cache_bytes gauge, given
// back when it is destroyed. Owned by the stream's reactor.
class KvAccount {
 public:
  explicit KvAccount(ServerCounters& counters) : counters_(counters) {}
  KvAccount(const KvAccount&) = delete;
  KvAccount& operator=(const KvAccount&) = delete;
  ~KvAccount();
  // Reserves `bytes` if the budget has them; false (nothing reserved) if not.
  bool reserve(int64_t bytes, int64_t budget);
  // The gauge follows the decoder's cache as it grows (after each round).
  void track(const TargetDecoder& decoder);

 private:
  ServerCounters& counters_;
  int64_t reserved_ = 0;
  int64_t held_ = 0;
};

// Checks the request, reserves its KV cache in `account` and starts its
// decoder: RESOURCE_EXHAUSTED when the reservation would exceed the budget.
grpc::Status start_decoder(ServiceContext& ctx, const v1::GenerationRequest& req,
                           std::unique_ptr<TargetDecoder>& decoder, KvAccount& account);

}  // namespace splitspec

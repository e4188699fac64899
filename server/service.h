#pragma once
// The splitspec.v1.SplitSpec service: Session (speculative rounds), Generate
// (cloud-only autoregressive) and GetInfo, on gRPC's callback API so that an
// idle stream costs no thread. Target forwards run on the ComputeQueue.
#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "common/early_exit/early_exit.h"
#include "common/engine/model.h"
#include "common/decoding/target_decoder.h"
#include "proto/splitspec.grpc.pb.h"
#include "server/compute_queue.h"
#include "server/server_config.h"

namespace splitspec {

// Counters behind GetInfo's ServerStats.
struct ServerCounters {
  std::atomic<int32_t> active_sessions{0};
  std::atomic<int64_t> sessions_total{0};
  std::atomic<int64_t> sessions_rejected{0};
  std::atomic<int64_t> rounds_total{0};
  std::atomic<int64_t> draft_tokens_proposed{0};
  std::atomic<int64_t> draft_tokens_accepted{0};
  std::atomic<int64_t> tokens_generated{0};
  std::atomic<int64_t> target_forwards{0};
  std::atomic<int64_t> invalid_requests{0};
  std::atomic<int64_t> early_verdicts{0};
};

// Everything a stream needs from the server, shared by all of them.
struct ServiceContext {
  ServerConfig config;
  std::shared_ptr<const Model> target;
  std::string model_name;
  std::string tokenizer_fingerprint;  // empty: the target ships no tokenizer
  std::optional<EarlyExits> exits;    // the active early exits, when any
  bool exit_priority = true;          // early verdicts go out most confident first (else FIFO)
  ServerCounters counters;
  std::atomic<bool> serving{true};
  std::unique_ptr<ComputeQueue> compute;
  std::atomic<uint64_t> next_session_id{1};
  // Streams whose reactor still exists: a stream leaves the session count
  // when its end is decided, and this one when it is gone (shutdown drains it).
  std::atomic<int32_t> live_streams{0};
};

class SplitSpecService final : public v1::SplitSpec::CallbackService {
 public:
  explicit SplitSpecService(ServiceContext& ctx) : ctx_(ctx) {}

  grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>* Session(grpc::CallbackServerContext* context) override;
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* context,
                                                          const v1::GenerationRequest* request) override;
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context, const v1::GetInfoRequest* request,
                                    v1::ServerInfo* response) override;

 private:
  ServiceContext& ctx_;
};

// Admission of a new stream: OK and the session counted, or the status to
// refuse it with (UNAVAILABLE while shutting down, RESOURCE_EXHAUSTED at the
// limit). A counted session calls leave() once its end is decided (before
// its client can learn it, so a client that starts its next generation at
// once finds the slot free), and retire() when its reactor is destroyed.
grpc::Status admit(ServiceContext& ctx);
void leave(ServiceContext& ctx);
void retire(ServiceContext& ctx);

// The counters in Prometheus text format, names in the style of vLLM's
// spec_decode_* metrics.
std::string render_metrics(const ServiceContext& ctx);

// Checks a request against the target and the server's limits and starts
// its decoder. FAILED_PRECONDITION when vocabulary or tokenizer differ from
// the target's; INVALID_ARGUMENT for a bad prompt or options.
grpc::Status start_decoder(const ServiceContext& ctx, const v1::GenerationRequest& req,
                           std::unique_ptr<TargetDecoder>& decoder);

}  // namespace splitspec

#include "client/server_link.h"

#include "proto/convert.h"

namespace splitspec {

namespace {

std::string code_name(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    default: return "code " + std::to_string(static_cast<int>(c));
  }
}

}  // namespace

ServerLink::ServerLink(const std::string& address, std::chrono::milliseconds timeout) : address_(address) {
  grpc::ChannelArguments args;
  // Notice a server that died without closing the connection.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // A generation waiting to resume must see a restarted server within a
  // fraction of a second, not after gRPC's default backoff (1 s growing to
  // 120 s). Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: that is each attempt's
  // connect timeout, which a slow link needs long.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250);
  channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  // A refused connection fails at once rather than at the timeout.
  const auto deadline = std::chrono::system_clock::now() + timeout;
  grpc_connectivity_state state = channel_->GetState(true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN)
      throw Error("cannot reach server " + address + ": connection failed (is it running? is the address right?)");
    if (!channel_->WaitForStateChange(state, deadline))
      throw Error("cannot reach server " + address + " within " + std::to_string(timeout.count()) +
                  " ms (is it running? is the address right?)");
    state = channel_->GetState(true);
  }
  stub_ = v1::SplitSpec::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
  info_ = fetch_info(timeout);
  if (!info_.serving()) throw Error("server " + address + " is shutting down");
}

v1::ServerInfo ServerLink::fetch_info(std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::ServerInfo out;
  const grpc::Status s = stub_->GetInfo(&ctx, v1::GetInfoRequest{}, &out);
  if (!s.ok()) throw error("GetInfo failed", s);
  return out;
}

bool ServerLink::wait_connected(std::chrono::steady_clock::time_point until, bool refused_ends,
                                const std::function<bool()>& stop) {
  grpc_connectivity_state state = channel_->GetState(true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_SHUTDOWN || (refused_ends && state == GRPC_CHANNEL_TRANSIENT_FAILURE)) return false;
    const auto now = std::chrono::steady_clock::now();
    if (now >= until || (stop && stop())) return false;
    // In slices, so that a cancel is seen within one.
    const auto slice = std::min(until - now, std::chrono::steady_clock::duration(std::chrono::milliseconds(50)));
    if (channel_->WaitForStateChange(
            state, std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(slice)))
      state = channel_->GetState(true);
  }
  return true;
}

void ServerLink::check_same_target(std::chrono::milliseconds timeout) {
  const v1::ServerInfo now = fetch_info(timeout);
  auto describe = [](const v1::ServerInfo& i) {
    return i.model_name() + " (vocabulary " + std::to_string(i.vocab_size()) + ", context " +
           std::to_string(i.max_context()) + ", hidden size " + std::to_string(i.hidden_size()) + ")";
  };
  if (now.model_name() != info_.model_name() || now.vocab_size() != info_.vocab_size() ||
      now.tokenizer_fingerprint() != info_.tokenizer_fingerprint() || now.max_context() != info_.max_context() ||
      now.hidden_size() != info_.hidden_size())
    throw error("now serves " + describe(now) + ", not " + describe(info_) + " as when this client connected");
}

bool ServerLink::serving(std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::health::v1::HealthCheckResponse r;
  const grpc::Status s = health_->Check(&ctx, grpc::health::v1::HealthCheckRequest{}, &r);
  return s.ok() && r.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

Error ServerLink::error(const std::string& what, const grpc::Status& s) const {
  std::string hint;
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) hint = " (is the server running and reachable?)";
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) hint = " (the request's deadline passed)";
  return Error("server " + address_ + ": " + what + ": " + code_name(s.error_code()) + ": " + s.error_message() + hint);
}

Error ServerLink::error(const std::string& what) const { return Error("server " + address_ + ": " + what); }

v1::GenerationRequest generation_request(const std::vector<int32_t>& prompt, const GenerateOptions& o, int64_t vocab,
                                         const std::string& tokenizer_fingerprint) {
  v1::GenerationRequest w;
  w.mutable_prompt_ids()->Add(prompt.begin(), prompt.end());
  *w.mutable_sampling() = to_wire(o.sampling);
  w.set_max_new_tokens(o.max_new_tokens);
  w.set_ignore_eos(o.ignore_eos);
  w.set_vocab_size(static_cast<int32_t>(vocab));
  w.set_tokenizer_fingerprint(tokenizer_fingerprint);
  return w;
}

void check_prompt_for_server(const std::vector<int32_t>& prompt, int64_t vocab, int64_t context) {
  for (int32_t t : prompt)
    if (t < 0 || t >= vocab)
      throw Error("prompt token id " + std::to_string(t) + " outside the vocabulary [0, " + std::to_string(vocab) + ")");
  if (static_cast<int64_t>(prompt.size()) >= context)
    throw Error("prompt of " + std::to_string(prompt.size()) + " tokens does not fit the target's context of " +
                std::to_string(context) + " with room to generate");
}

}  // namespace splitspec

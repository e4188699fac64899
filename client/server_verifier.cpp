#include "client/server_verifier.h"

#include <algorithm>

#include <google/protobuf/io/coded_stream.h>

#include "common/util/stopwatch.h"
#include "proto/convert.h"
#include "proto/round_codec.h"

namespace splitspec {

ServerVerifier::ServerVerifier(ServerLink& link, int64_t vocab, std::string tokenizer_fingerprint)
    : link_(link), vocab_(vocab), fingerprint_(std::move(tokenizer_fingerprint)) {}

ServerVerifier::~ServerVerifier() = default;

void ServerVerifier::begin(const std::vector<int32_t>& prompt, const GenerateOptions& options, const ExtrasRequest& extras,
                           std::chrono::steady_clock::time_point deadline, EarlyHandler on_early) {
  reset_stream();
  if (prompt.empty()) throw Error("prompt is empty: give at least one token (e.g. BOS)");
  check_prompt_for_server(prompt, vocab_, link_.info().max_context());
  stats_ = VerifierStats{};
  round_ = 0;
  hint_ = 0;
  greedy_ = options.sampling.greedy();
  want_extras_ = extras.any();
  want_hidden_ = extras.hidden;
  want_rows_ = extras.hidden_rows;
  if (want_rows_ && !link_.info().verdict_hidden_rows())
    throw Error(link_.address() + ": the server does not send the target's hidden rows a model's own MTP head drafts "
                "from (its version " + link_.info().version() + ", backend '" + link_.info().backend() +
                "'); run the drafter with a local target or a CPU server of this version");
  if (!extras.kv_row_layers.empty())
    throw Error(link_.address() + ": a server does not send the target's keys and values, which the drafter attends "
                "over; run it with a local target");
  handler_ = std::move(on_early);
  {
    std::lock_guard<std::mutex> lock(mu_);
    shape_ = DraftTree{};
    shape_round_ = 0;
    early_round_ = 0;
    early_in_round_ = 0;
    early_error_.clear();
  }
  finished_ = options.max_new_tokens == 0;
  if (finished_) return;
  SessionStream::EarlyHandler early;
  if (handler_) early = [this](const v1::RoundVerdict& v) { return check_early(v); };
  // gRPC takes the deadline on the system clock; a year stands for none.
  const auto left = std::min<std::chrono::steady_clock::duration>(deadline - std::chrono::steady_clock::now(),
                                                                  std::chrono::hours(24 * 365));
  const auto wall_deadline =
      std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(left);
  reset_stream(std::make_unique<SessionStream>(link_.stub(), wall_deadline, early));
  v1::SessionRequest open;
  *open.mutable_open() = generation_request(prompt, options, vocab_, fingerprint_);
  open.mutable_open()->set_early_verdicts(static_cast<bool>(handler_));
  open.mutable_open()->set_verdict_top_k(extras.top_k);
  open.mutable_open()->set_verdict_hidden_state(extras.hidden);
  open.mutable_open()->set_verdict_hidden_rows(extras.hidden_rows);
  for (int32_t l : extras.hidden_row_layers) open.mutable_open()->add_verdict_hidden_row_layers(l);
  row_layers_ = static_cast<int64_t>(extras.hidden_row_layers.size());
  stream_->send(std::move(open));
}

int32_t ServerVerifier::budget(int64_t length) const {
  const int64_t room = std::max<int64_t>(0, link_.info().max_context() - length);
  int64_t most = link_.info().max_draft_tokens();
  // The server's advice under load: fewer tokens a round, so that many
  // sessions fit its batched forward.
  const int32_t hint = hint_.load();
  if (hint > 0) most = std::min<int64_t>(most, hint);
  return static_cast<int32_t>(std::min<int64_t>(room, most));
}


bool ServerVerifier::check_early(const v1::RoundVerdict& v) {
  // At most one per exit the server runs: each may cost a pre-draft.
  const int exits = link_.info().early_exit_layers_size();
  early_in_round_ = v.round() == early_round_ ? early_in_round_ + 1 : 1;
  early_round_ = v.round();
  PredictedVerdict p;
  std::string bad;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (v.round() != shape_round_) {
      bad = "it is not for the open round " + std::to_string(shape_round_);
    } else {
      bad = decode_verdict(v, shape_, vocab_, p.verdict);
      if (bad.empty()) bad = decode_hidden(v.hidden_state(), link_.info().hidden_size(), p.hidden);
      if (bad.empty() && early_in_round_ > exits)
        bad = "more than one per exit (the server runs " + std::to_string(exits) + ")";
    }
    if (!bad.empty()) {
      if (early_error_.empty())
        early_error_ = "server " + link_.address() + ": malformed early verdict for round " + std::to_string(v.round()) +
                       ": " + bad;
      return false;
    }
  }
  p.round = v.round();
  p.confidence = v.confidence();
  p.exit_layer = v.exit_layer();
  handler_(p);
  return true;
}

void ServerVerifier::reset_stream(std::unique_ptr<SessionStream> next) {
  std::unique_ptr<SessionStream> old;
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    old = std::move(stream_);
    stream_ = std::move(next);
  }
  // Outside the lock: the destructor waits for gRPC to let the call go.
}

void ServerVerifier::interrupt() {
  std::lock_guard<std::mutex> lock(stream_mu_);
  if (stream_) stream_->cancel();
}

void ServerVerifier::fail(const std::string& what) {
  const grpc::Status st = stream_->status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!early_error_.empty()) throw Error(early_error_);
  }
  if (st.ok()) throw link_.error(what);
  const Error e = link_.error(what, st);
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) throw VerifierUnavailable(e.what());
  throw e;
}

RoundResult ServerVerifier::verify(const DraftTree& tree, bool early) {
  if (!stream_) throw Error("verify: no generation is open");
  const uint32_t round = ++round_;
  {
    // Before the send: early verdicts of this round may arrive at once.
    std::lock_guard<std::mutex> lock(mu_);
    shape_.tokens = tree.tokens;
    shape_.parents = tree.parents;
    shape_round_ = round;
  }
  v1::SessionRequest msg;
  v1::Draft* d = msg.mutable_draft();
  d->set_round(round);
  encode_draft(tree, !greedy_, *d);
  d->set_early_verdicts(early && handler_);
  stats_.draft_bytes += static_cast<int64_t>(msg.ByteSizeLong());
  const auto sent = SteadyClock::now();
  stream_->send(std::move(msg));

  const auto until = round_timeout_.count() > 0 ? sent + round_timeout_ : SteadyClock::time_point::max();
  std::optional<v1::SessionResponse> resp;
  do {
    resp = stream_->next(until);
    if (!resp && !stream_->ended()) {
      reset_stream();  // cancels the call: the server frees the session
      throw VerifierUnavailable(link_.error("no verdict for round " + std::to_string(round) + " within the round timeout of " +
                                            std::to_string(round_timeout_.count()) + " ms")
                                    .what());
    }
    if (!resp) fail("the session ended in round " + std::to_string(round));
  } while (resp->has_opened());
  const auto got = SteadyClock::now();
  if (!resp->has_verdict()) fail("unexpected message in round " + std::to_string(round));
  const v1::RoundVerdict& v = resp->verdict();
  if (v.round() != round)
    throw link_.error("verdict for round " + std::to_string(v.round()) + " in round " + std::to_string(round));
  RoundResult r;
  const std::string bad = decode_verdict(v, tree, vocab_, r.verdict);
  if (!bad.empty()) throw link_.error("malformed verdict for round " + std::to_string(round) + ": " + bad);
  for (size_t i = 0; i < r.verdict.path.size() && i < r.verdict.tokens.size(); ++i)
    if (r.verdict.tokens[i] != tree.tokens[r.verdict.path[i]]) throw link_.error("verdict contradicts the draft");
  r.finish = from_wire(v.finish_reason());
  hint_ = std::max(0, v.draft_hint());
  r.forward_ms = v.timings().forward_ms();
  r.verify_ms = v.timings().verify_ms();
  if (want_extras_) {
    if (const std::string bad = decode_top_k(v, vocab_, r.extras.top_k); !bad.empty())
      throw link_.error("malformed top-K in the verdict for round " + std::to_string(round) + ": " + bad);
    for (const v1::TokenDistribution& k : v.top_k()) {
      // What the top K add to the verdict on the wire: each entry, its tag and its length.
      const size_t entry = k.ByteSizeLong();
      stats_.verdict_top_k_bytes += static_cast<int64_t>(
          entry + 1 + google::protobuf::io::CodedOutputStream::VarintSize32(static_cast<uint32_t>(entry)));
    }
    std::string bad = decode_hidden(v.hidden_state(), link_.info().hidden_size(), r.extras.hidden);
    if (bad.empty() && want_hidden_ && !v.tokens().empty() && r.extras.hidden.empty()) bad = "none was sent";
    if (!bad.empty()) throw link_.error("malformed hidden state in the verdict for round " + std::to_string(round) + ": " + bad);
    bad = decode_hidden_rows(v.hidden_rows(), link_.info().hidden_size() * std::max<int64_t>(1, row_layers_),
                             r.extras.hidden_rows);
    r.extras.hidden_rows_from = v.hidden_rows_from();
    if (bad.empty() && r.extras.hidden_rows_from < 0) bad = "a negative first position";
    if (bad.empty() && want_rows_ && !v.tokens().empty() && r.extras.hidden_rows.empty()) bad = "none were sent";
    if (!bad.empty()) throw link_.error("malformed hidden rows in the verdict for round " + std::to_string(round) + ": " + bad);
    for (const size_t bytes : {v.hidden_state().size(), v.hidden_rows().size()})
      if (bytes > 0)
        stats_.verdict_hidden_bytes += static_cast<int64_t>(
            bytes + 1 + google::protobuf::io::CodedOutputStream::VarintSize32(static_cast<uint32_t>(bytes)));
  }
  stats_.target_forwards += 1;
  stats_.verdict_bytes += static_cast<int64_t>(v.ByteSizeLong());
  stats_.verify_wait_ms += ms_between(sent, got);
  stats_.server_ms += v.timings().queue_ms() + v.timings().forward_ms() + v.timings().verify_ms();
  stats_.target_forward_ms += v.timings().forward_ms();
  stats_.server_forward_ms += v.timings().forward_ms();
  stats_.server_exits_ms += v.timings().exits_ms();
  return r;
}

void ServerVerifier::end() {
  if (!stream_) return;
  if (!stream_->status().ok()) fail("session ended badly");
  reset_stream();
}

}  // namespace splitspec

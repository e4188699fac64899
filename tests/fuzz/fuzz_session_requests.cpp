// libFuzzer target: the server's Session stream against a live server. One
// real in-process splitspec::Server (server/server.h) serves the demo target
// (models/demo-target, early exits and tokenizer included: see live()) on a
// loopback port; each input
// is one Session stream of SessionRequest messages sent by a real gRPC
// client, so every check the server makes on what it reads runs as it does
// in production: session_reactor.cpp (Open, Draft, Cancel, q, parents,
// rounds), service.cpp start_decoder (vocabulary, tokenizer, prompt, limits),
// TargetDecoder::check_round/verify and the compute queue.
//
// Properties: the server never crashes (ASan, UBSan, aborts); every stream
// ends with a status, within a deadline, and that status is OK,
// INVALID_ARGUMENT, FAILED_PRECONDITION, CANCELLED or a server limit that
// names itself (the KV budget, the send queue, the idle and lifetime limits,
// all set tight here; INTERNAL, UNKNOWN, any other RESOURCE_EXHAUSTED or a
// missed deadline is a finding); verdicts name tokens
// of the vocabulary and rounds that were sent; afterwards the server answers
// GetInfo and grpc.health.v1 (SERVING) and counts no open session.
//
// Input: one flags byte, then SessionRequest messages, each serialized and
// prefixed with its length as a varint (protobuf's delimited format), at
// most kMaxMessages; the first that does not parse ends the sequence.
//   flags bit 0: lockstep (after each message, wait for its answer: Opened
//                or the round's final verdict) instead of writing them all
//                at once;
//   flags bit 1: the client cancels the call once its messages are written.
//
// With SPLITSPEC_FUZZ_WRITE_SEEDS=DIR it writes its seeds there (built from
// the live target's GetInfo and greedy tokens) and exits.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/model/kv_cache.h"
#include "common/model/model_config.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/splitspec.grpc.pb.h"
#include "server/server.h"

namespace {

namespace v1 = splitspec::v1;
constexpr int kMaxMessages = 24;
constexpr auto kStreamDeadline = std::chrono::seconds(60);

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_session_requests: %s\n", what.c_str());
  std::abort();
}

struct Live {
  // Never destroyed (shut down at exit): the server serves every input.
  splitspec::Server* server = nullptr;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::SplitSpec::Stub> stub;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
  v1::ServerInfo info;
};

v1::ServerInfo get_info(Live& live) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ServerInfo info;
  const grpc::Status s = live.stub->GetInfo(&ctx, v1::GetInfoRequest(), &info);
  if (!s.ok()) fail("GetInfo failed after a stream: code " + std::to_string(s.error_code()) + " " + s.error_message());
  return info;
}

void check_health(Live& live) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse res;
  const grpc::Status s = live.health->Check(&ctx, req, &res);
  if (!s.ok() || res.status() != grpc::health::v1::HealthCheckResponse::SERVING)
    fail("health check failed after a stream: code " + std::to_string(s.error_code()) + " " + s.error_message());
}

Live& live() {
  static Live* l = [] {
    auto* x = new Live;
    splitspec::ServerConfig c;
    // The demo target, linked file by file into a directory of our own. Its
    // tokenizer runs in the splitspec-spm-serve helper in this build (the
    // sanitizers refuse the module's dlopen), so the server checks each
    // client's tokenizer fingerprint as in production.
    const std::filesystem::path demo = std::filesystem::path(SPLITSPEC_SOURCE_DIR) / "models" / "demo-target";
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("splitspec-fuzz-target-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.model", "early_exits.json", "early_exits.safetensors"}) {
      std::error_code ec;
      std::filesystem::remove(dir / f, ec);
      std::filesystem::create_symlink(demo / f, dir / f);
    }
    c.target_dir = dir.string();
    c.listen = "127.0.0.1:0";
    c.max_sessions = 4;
    c.compute_threads = 1;
    c.shutdown_grace_s = 1;
    c.log_level = "error";  // rejected requests log warnings: one per input
    // The server's limits, tight enough for inputs to reach them: a KV
    // budget of half the context (a long prompt or max_new_tokens is
    // refused at Open), a small send queue, short idle and lifetime limits.
    const splitspec::ModelConfig mc = splitspec::load_model_config((demo / "config.json").string());
    c.kv_budget_bytes = static_cast<int64_t>(splitspec::KVCache::bytes_per_position(mc, splitspec::KVType::F32)) *
                        mc.max_position_embeddings / 2;
    c.max_send_queue_bytes = 64 << 10;
    c.session_idle_timeout_s = 5;
    c.max_session_lifetime_s = 50;
    x->server = new splitspec::Server(c);
    x->server->start();
    // libFuzzer ends with exit(), the server still serving: Server stops
    // itself at exit, before static destructors run.
    x->channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(x->server->port()), grpc::InsecureChannelCredentials());
    x->stub = v1::SplitSpec::NewStub(x->channel);
    x->health = grpc::health::v1::Health::NewStub(x->channel);
    x->info = get_info(*x);
    return x;
  }();
  return *l;
}

struct Outcome {
  grpc::Status status;
  std::vector<v1::SessionResponse> responses;
};

// One Session stream: `msgs` written in lockstep or all at once, then the
// half-close (or a cancel), the remaining responses read, the status taken.
Outcome run_stream(Live& l, const std::vector<v1::SessionRequest>& msgs, bool lockstep, bool cancel) {
  Outcome out;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kStreamDeadline);
  auto stream = l.stub->Session(&ctx);
  bool ended = false;
  for (const v1::SessionRequest& m : msgs) {
    if (!stream->Write(m)) break;
    if (!lockstep) continue;
    const bool answered = m.has_open() || m.has_draft();
    if (!answered) continue;  // Cancel or an empty message: the stream ends
    v1::SessionResponse r;
    while (true) {
      if (!stream->Read(&r)) {
        ended = true;
        break;
      }
      out.responses.push_back(r);
      if (r.has_opened() || (r.has_verdict() && r.verdict().final())) break;
    }
    if (ended) break;
  }
  if (cancel) {
    ctx.TryCancel();
  } else if (!ended) {
    stream->WritesDone();
  }
  v1::SessionResponse r;
  while (stream->Read(&r)) out.responses.push_back(r);
  out.status = stream->Finish();
  return out;
}

void check_outcome(Live& l, const std::vector<v1::SessionRequest>& msgs, const Outcome& o, bool cancel) {
  using grpc::StatusCode;
  const StatusCode code = o.status.error_code();
  const std::string& why = o.status.error_message();
  // A limit reached says which: the KV budget or the send queue
  // (RESOURCE_EXHAUSTED), the idle or lifetime limit (DEADLINE_EXCEEDED).
  const bool limit =
      (code == StatusCode::RESOURCE_EXHAUSTED && (why.find("kv_budget_bytes") != std::string::npos ||
                                                  why.find("max_send_queue_bytes") != std::string::npos)) ||
      (code == StatusCode::DEADLINE_EXCEEDED && (why.find("session_idle_timeout_s") != std::string::npos ||
                                                 why.find("max_session_lifetime_s") != std::string::npos));
  const bool expected = limit || code == StatusCode::OK || code == StatusCode::INVALID_ARGUMENT ||
                        code == StatusCode::FAILED_PRECONDITION || code == StatusCode::CANCELLED;
  if (!expected)
    fail("stream ended with unexpected status " + std::to_string(code) + ": " + o.status.error_message());
  if (code == StatusCode::CANCELLED && !cancel) {
    bool sent_cancel = false;
    for (const auto& m : msgs) sent_cancel = sent_cancel || m.has_cancel();
    if (!sent_cancel) fail("stream CANCELLED without Cancel or a client cancel: " + o.status.error_message());
  }
  std::set<uint32_t> rounds;
  for (const auto& m : msgs)
    if (m.has_draft()) rounds.insert(m.draft().round());
  const int32_t vocab = l.info.vocab_size();
  bool opened = false;
  for (const v1::SessionResponse& r : o.responses) {
    if (r.has_opened()) {
      if (opened) fail("two Opened in one stream");
      opened = true;
      continue;
    }
    if (!r.has_verdict()) fail("an empty SessionResponse");
    if (!opened) fail("a verdict before Opened");
    const v1::RoundVerdict& v = r.verdict();
    if (!rounds.count(v.round())) fail("a verdict for round " + std::to_string(v.round()) + ", which was never sent");
    for (int32_t t : v.tokens())
      if (t < 0 || t >= vocab) fail("a verdict token outside the vocabulary: " + std::to_string(t));
    if (v.accepted() < 0 || v.accepted() > l.info.max_draft_tokens()) fail("verdict accepted out of range");
  }
  // The server is still there and holds no session: leave() runs before the
  // client can learn the status, so none should be open now (a short grace
  // for a client cancel, whose server side runs on its own).
  for (int i = 0;; ++i) {
    const v1::ServerInfo info = get_info(l);
    if (info.stats().active_sessions() == 0) break;
    if (i == 200)
      fail("the server still counts " + std::to_string(info.stats().active_sessions()) + " open sessions after the stream ended");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  check_health(l);
}

// ---------------------------------------------------------------------------
// Seeds.

v1::SessionRequest open_req(const v1::ServerInfo& info, std::vector<int32_t> prompt, int32_t max_new) {
  v1::SessionRequest r;
  v1::GenerationRequest* o = r.mutable_open();
  o->mutable_prompt_ids()->Add(prompt.begin(), prompt.end());
  o->set_max_new_tokens(max_new);
  o->set_vocab_size(info.vocab_size());
  o->set_tokenizer_fingerprint(info.tokenizer_fingerprint());
  return r;
}

v1::SessionRequest draft_req(uint32_t round, std::vector<int32_t> tokens, std::vector<int32_t> parents = {}) {
  v1::SessionRequest r;
  v1::Draft* d = r.mutable_draft();
  d->set_round(round);
  d->mutable_tokens()->Add(tokens.begin(), tokens.end());
  d->mutable_parents()->Add(parents.begin(), parents.end());
  return r;
}

void add_q(v1::SessionRequest& r, std::vector<int32_t> ids, std::vector<float> probs) {
  v1::TokenDistribution* q = r.mutable_draft()->add_q();
  q->mutable_ids()->Add(ids.begin(), ids.end());
  q->mutable_probs()->Add(probs.begin(), probs.end());
}

void write_seed(const std::filesystem::path& dir, const std::string& name, uint8_t flags,
                const std::vector<v1::SessionRequest>& msgs) {
  std::string bytes(1, static_cast<char>(flags));
  {
    google::protobuf::io::StringOutputStream s(&bytes);
    for (const auto& m : msgs)
      if (!google::protobuf::util::SerializeDelimitedToZeroCopyStream(m, &s)) fail("cannot serialize a seed");
  }
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

void write_seeds(Live& l, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const v1::ServerInfo& info = l.info;
  const std::vector<int32_t> prompt = {1, 450, 496, 1735, 170, 432};
  // The target's first greedy tokens after `prompt`, one autoregressive round
  // (an empty Draft) at a time: drafts made of them are accepted.
  std::vector<v1::SessionRequest> probe = {open_req(info, prompt, 8)};
  for (uint32_t i = 1; i <= 8; ++i) probe.push_back(draft_req(i, {}));
  std::vector<int32_t> g;
  for (const auto& r : run_stream(l, probe, true, false).responses)
    if (r.has_verdict()) g.insert(g.end(), r.verdict().tokens().begin(), r.verdict().tokens().end());
  if (g.size() < 8) fail("the probe session produced " + std::to_string(g.size()) + " greedy tokens, not 8");
  const int32_t V = info.vocab_size();

  write_seed(dir, "greedy-chain-tree", 1,
             {open_req(info, prompt, 12), draft_req(1, {g[0], g[1], g[2]}), draft_req(2, {g[4], 13}),
              draft_req(3, {7, 8, 9, 10}, {-1, -1, 0, 1}), draft_req(4, {})});
  {
    auto o = open_req(info, prompt, 10);
    auto* s = o.mutable_open()->mutable_sampling();
    s->set_temperature(0.8f);
    s->set_top_k(40);
    s->set_top_p(0.9f);
    s->set_seed(7);
    auto d1 = draft_req(1, {g[0], g[1]});
    add_q(d1, {g[0]}, {1.0f});
    add_q(d1, {g[1], 5}, {0.6f, 0.4f});
    auto d2 = draft_req(2, {11, 12}, {-1, -1});
    add_q(d2, {11, 12}, {0.5f, 0.5f});
    add_q(d2, {12}, {1.0f});
    write_seed(dir, "sampling-q", 1, {o, d1, d2});
  }
  {
    auto o = open_req(info, prompt, 10);
    o.mutable_open()->set_early_verdicts(true);
    o.mutable_open()->set_verdict_top_k(4);
    o.mutable_open()->set_verdict_hidden_state(true);
    auto d1 = draft_req(1, {g[0], g[1], g[2], g[3]});
    d1.mutable_draft()->set_early_verdicts(true);
    auto d2 = draft_req(2, {g[5], 3});
    d2.mutable_draft()->set_early_verdicts(true);
    write_seed(dir, "early-verdicts-extras", 1, {o, d1, d2});
  }
  {
    v1::SessionRequest cancel;
    cancel.mutable_cancel();
    write_seed(dir, "cancel-message", 1, {open_req(info, prompt, 8), draft_req(1, {g[0]}), cancel});
  }
  write_seed(dir, "client-cancel", 3, {open_req(info, prompt, 8), draft_req(1, {g[0], g[1]})});
  write_seed(dir, "pipelined-busy", 0,
             {open_req(info, prompt, 8), draft_req(1, {g[0]}), draft_req(2, {g[2]}), draft_req(3, {})});
  write_seed(dir, "draft-before-open", 1, {draft_req(1, {5})});
  write_seed(dir, "open-twice", 1, {open_req(info, prompt, 4), open_req(info, prompt, 4)});
  write_seed(dir, "empty-request", 1, {open_req(info, prompt, 4), v1::SessionRequest()});
  write_seed(dir, "nothing-to-do", 1, {open_req(info, prompt, 0), draft_req(1, {})});
  {
    std::vector<int32_t> long_prompt(500, 300);
    long_prompt[0] = 1;
    write_seed(dir, "context-full", 1,
               {open_req(info, long_prompt, 64), draft_req(1, std::vector<int32_t>(12, 42)),
                draft_req(2, std::vector<int32_t>(16, 43))});
  }
  {
    auto bad_vocab = open_req(info, prompt, 4);
    bad_vocab.mutable_open()->set_vocab_size(V + 1);
    write_seed(dir, "vocab-mismatch", 1, {bad_vocab});
    auto bad_fp = open_req(info, prompt, 4);
    bad_fp.mutable_open()->set_tokenizer_fingerprint("0000000000000000");
    write_seed(dir, "tokenizer-mismatch", 1, {bad_fp});
    auto bad_k = open_req(info, prompt, 4);
    bad_k.mutable_open()->set_verdict_top_k(info.max_verdict_top_k() + 1);
    write_seed(dir, "top-k-too-large", 1, {bad_k});
    auto bad_tok = open_req(info, {1, V}, 4);
    write_seed(dir, "prompt-outside-vocab", 1, {bad_tok});
    auto bad_temp = open_req(info, prompt, 4);
    bad_temp.mutable_open()->mutable_sampling()->set_temperature(-1.0f);
    write_seed(dir, "bad-sampling", 1, {bad_temp});
  }
  {
    std::vector<v1::SessionRequest> m = {open_req(info, prompt, 3)};
    m[0].mutable_open()->set_ignore_eos(true);
    m.push_back(draft_req(1, {g[0], g[1], g[2], g[3]}));
    m.push_back(draft_req(2, {g[4]}));
    write_seed(dir, "draft-after-finish", 1, m);
  }
  write_seed(dir, "wrong-round", 1, {open_req(info, prompt, 8), draft_req(2, {g[0]})});
  {
    auto d = draft_req(1, {g[0], g[1]});
    add_q(d, {g[0], g[0]}, {0.5f, 0.5f});
    add_q(d, {g[1]}, {0.5f, 0.5f});
    write_seed(dir, "greedy-bad-q", 1, {open_req(info, prompt, 8), d});
    auto s = open_req(info, prompt, 8);
    s.mutable_open()->mutable_sampling()->set_temperature(1.0f);
    auto d2 = draft_req(1, {g[0], g[1]});
    add_q(d2, {g[0], V}, {0.5f, 0.5f});
    add_q(d2, {g[1]}, {0.7f});
    write_seed(dir, "sampling-bad-q", 1, {s, d2});
  }
  write_seed(dir, "bad-parents", 1, {open_req(info, prompt, 8), draft_req(1, {g[0], g[1], g[2]}, {-1, 1, 0})});
  write_seed(dir, "parents-count", 1, {open_req(info, prompt, 8), draft_req(1, {g[0], g[1]}, {-1})});
  write_seed(dir, "token-outside-vocab", 1, {open_req(info, prompt, 8), draft_req(1, {g[0], V})});
  write_seed(dir, "too-many-tokens", 1,
             {open_req(info, prompt, 8), draft_req(1, std::vector<int32_t>(info.max_draft_tokens() + 1, 5))});
  std::printf("fuzz_session_requests: seeds written to %s (greedy tokens:", dir.c_str());
  for (int32_t t : g) std::printf(" %d", t);
  std::printf(")\n");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Live& l = live();
  if (const char* dir = std::getenv("SPLITSPEC_FUZZ_WRITE_SEEDS")) {
    write_seeds(l, dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Live& l = live();
  const bool lockstep = data[0] & 1, cancel = data[0] & 2;
  std::vector<v1::SessionRequest> msgs;
  {
    google::protobuf::io::ArrayInputStream in(data + 1, static_cast<int>(size - 1));
    google::protobuf::io::CodedInputStream coded(&in);
    while (static_cast<int>(msgs.size()) < kMaxMessages) {
      v1::SessionRequest m;
      bool clean_eof = false;
      if (!google::protobuf::util::ParseDelimitedFromCodedStream(&m, &coded, &clean_eof)) break;
      msgs.push_back(std::move(m));
    }
  }
  const Outcome o = run_stream(l, msgs, lockstep, cancel);
  check_outcome(l, msgs, o, cancel);
  return 0;
}

#include "client/client.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <grpcpp/grpcpp.h>

#include <filesystem>

#include "client/local_ar.h"
#include "client/local_tree.h"
#include "client/speculative_chain.h"
#include "client/predraft.h"
#include "client/predraft_switch.h"
#include "client/request_options.h"
#include "client/session_stream.h"
#include "common/util/error.h"
#include "common/engine/model.h"
#include "common/drafting/model_drafter.h"
#include "common/util/stopwatch.h"
#include "common/engine/threads.h"
#include "common/engine/tokenizer.h"
#include "proto/convert.h"
#include "proto/splitspec.grpc.pb.h"

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

Error server_error(const std::string& server, const std::string& what, const grpc::Status& s) {
  std::string hint;
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) hint = " (is the server running and reachable?)";
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) hint = " (the request's deadline passed)";
  return Error("server " + server + ": " + what + ": " + code_name(s.error_code()) + ": " + s.error_message() + hint);
}

v1::TokenDistribution sparse(const Distribution& q) {
  v1::TokenDistribution w;
  for (size_t i = 0; i < q.size(); ++i)
    if (q[i] > 0.0f) {
      w.add_ids(static_cast<int32_t>(i));
      w.add_probs(q[i]);
    }
  return w;
}

// Why `v` cannot be a verdict on a chain draft of at most `gamma` tokens over
// `vocab`; empty if it can. Early verdicts are checked too, before they reach
// a pre-draft worker, whose draft forward would throw on a bad id.
std::string malformed_verdict(const v1::RoundVerdict& v, int32_t gamma, int64_t vocab) {
  if (v.tokens_size() == 0) return "no tokens";
  // The accepted drafts, then the target's token; a final verdict that ends
  // the generation stops at its last token (EOS, or the length reached).
  const bool ends = v.final() && v.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
  if (v.accepted() < 0 || v.tokens_size() > v.accepted() + 1 || (!ends && v.tokens_size() != v.accepted() + 1))
    return std::to_string(v.tokens_size()) + " tokens for " + std::to_string(v.accepted()) + " accepted";
  if (v.accepted() > gamma)
    return "accepts " + std::to_string(v.accepted()) + " of a " + std::to_string(gamma) + "-token draft";
  for (int32_t id : v.tokens())
    if (id < 0 || id >= vocab) return "token " + std::to_string(id) + " outside the vocabulary";
  return "";
}

}  // namespace

GenerateOptions to_generate_options(const Request& r) {
  GenerateOptions o;
  o.max_new_tokens = r.max_new_tokens;
  o.ignore_eos = r.ignore_eos;
  o.sampling.temperature = r.temperature;
  o.sampling.top_k = r.top_k;
  o.sampling.top_p = r.top_p;
  o.sampling.seed = r.seed;
  o.sampling.validate();
  if (r.max_new_tokens < 0) throw Error("max_new_tokens must be >= 0");
  return o;
}

Mode parse_mode(const std::string& name) {
  if (name == "cloud-ar") return Mode::kCloudAr;
  if (name == "edge-sd") return Mode::kEdgeSd;
  if (name == "edge-fsd") return Mode::kEdgeFsd;
  if (name == "local-ar") return Mode::kLocalAr;
  if (name == "local-sd") return Mode::kLocalSd;
  if (name == "local-tree") return Mode::kLocalTree;
  throw Error("unknown mode '" + name + "' (cloud-ar, edge-sd, edge-fsd, local-ar, local-sd or local-tree)");
}

std::string mode_name(Mode mode) {
  switch (mode) {
    case Mode::kCloudAr: return "cloud-ar";
    case Mode::kEdgeSd: return "edge-sd";
    case Mode::kEdgeFsd: return "edge-fsd";
    case Mode::kLocalAr: return "local-ar";
    case Mode::kLocalSd: return "local-sd";
    case Mode::kLocalTree: return "local-tree";
  }
  return "";
}

struct Client::Impl {
  ClientOptions options;
  std::shared_ptr<Model> draft, target;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string tokenizer_path;  // where it was looked for
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::SplitSpec::Stub> stub;
  v1::ServerInfo info;
  // Across generations: what pre-drafting is worth depends on the link and
  // the machines, not on the prompt, so it is learned once per client.
  PredraftSwitch predraft_switch;

  v1::ServerInfo fetch_info(std::chrono::milliseconds timeout) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    v1::ServerInfo out;
    const grpc::Status s = stub->GetInfo(&ctx, v1::GetInfoRequest{}, &out);
    if (!s.ok()) throw server_error(options.server, "GetInfo failed", s);
    return out;
  }

  int64_t vocab_size() const {
    if (draft) return draft->config().vocab_size;
    if (target) return target->config().vocab_size;
    return info.vocab_size();
  }

  v1::GenerationRequest generation_request(const std::vector<int32_t>& prompt, const GenerateOptions& o) const {
    v1::GenerationRequest w;
    w.mutable_prompt_ids()->Add(prompt.begin(), prompt.end());
    *w.mutable_sampling() = to_wire(o.sampling);
    w.set_max_new_tokens(o.max_new_tokens);
    w.set_ignore_eos(o.ignore_eos);
    w.set_vocab_size(static_cast<int32_t>(vocab_size()));
    if (tokenizer) w.set_tokenizer_fingerprint(tokenizer->fingerprint());
    return w;
  }

  // Every public generate ends here.
  Result generate(const std::vector<int32_t>& prompt_ids, const Request& request,
                  const std::function<void(int32_t)>& on_token, const std::function<void(const std::string&)>& on_text);
  Result run_local_ar(const std::vector<int32_t>& prompt, const GenerateOptions& o, const std::function<void(int32_t)>& on_token);
  Result run_local_spec(const std::vector<int32_t>& prompt, const Request& r, const GenerateOptions& o,
                        const std::function<void(int32_t)>& on_token);
  bool local() const {
    return options.mode == Mode::kLocalAr || options.mode == Mode::kLocalSd || options.mode == Mode::kLocalTree;
  }
  Result run_cloud_ar(const std::vector<int32_t>& prompt, const Request& r, const GenerateOptions& o,
                      const std::function<void(int32_t)>& on_token);
  Result run_edge_sd(const std::vector<int32_t>& prompt, const Request& r, const GenerateOptions& o,
                     const std::function<void(int32_t)>& on_token);
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

namespace {

std::shared_ptr<Model> load_local_target(const ClientOptions& o) {
  if (o.memory_budget.empty()) return Model::load(o.target_dir);
  if (!std::filesystem::is_directory(o.target_dir)) throw Error(o.target_dir + ": model directory does not exist");
  StreamOptions s;
  const uint64_t whole = fp32_weight_bytes(load_model_config(o.target_dir));
  s.budget_bytes = parse_bytes(o.memory_budget, whole);
  s.pipeline = o.stream_pipeline;
  if (!o.stream_read_ahead.empty()) s.read_ahead_bytes = parse_bytes(o.stream_read_ahead, whole);
  return Model::load_streamed(o.target_dir, s);
}

// What a generation on a streamed target read and held, from the stream's
// counters before it and now.
void add_stream_stats(const Model& target, const StreamStats& before, Stats& s) {
  if (!target.stream()) return;
  const StreamStats after = target.stream()->stats();
  s.weight_bytes_read = after.bytes_read - before.bytes_read;
  s.weight_memory_peak = after.peak_bytes;
  s.weight_stall_ms = after.stall_ms - before.stall_ms;
}

StreamStats stream_stats(const Model& target) { return target.stream() ? target.stream()->stats() : StreamStats{}; }

}  // namespace

std::unique_ptr<Client> Client::connect(const ClientOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  set_compute_threads(options.threads);
  std::string tok_path = options.tokenizer;
  switch (options.mode) {
    case Mode::kEdgeSd:
    case Mode::kEdgeFsd:
      if (options.draft_dir.empty()) throw Error(mode_name(options.mode) + " needs a draft model (--draft DIR)");
      if (options.mode == Mode::kEdgeFsd) parse_queue_policy(options.predraft_queue);
      impl->draft = Model::load(options.draft_dir);
      if (tok_path.empty()) tok_path = options.draft_dir;
      break;
    case Mode::kLocalAr:
    case Mode::kLocalSd:
    case Mode::kLocalTree:
      if (options.target_dir.empty()) throw Error(mode_name(options.mode) + " needs a target model (--target DIR)");
      if (options.mode != Mode::kLocalAr && options.draft_dir.empty())
        throw Error(mode_name(options.mode) + " needs a draft model (--draft DIR)");
      impl->target = load_local_target(options);
      if (options.mode != Mode::kLocalAr) {
        impl->draft = Model::load(options.draft_dir);
        if (impl->draft->config().vocab_size != impl->target->config().vocab_size)
          throw Error("draft " + options.draft_dir + " has vocab_size " + std::to_string(impl->draft->config().vocab_size) +
                      " but target " + options.target_dir + " has " + std::to_string(impl->target->config().vocab_size));
      }
      if (tok_path.empty()) tok_path = options.target_dir;
      break;
    case Mode::kCloudAr:
      if (tok_path.empty()) tok_path = options.draft_dir;
      break;
  }
  impl->tokenizer_path = tok_path;
  if (!tok_path.empty()) {
    const std::filesystem::path p(tok_path);
    const bool explicit_path = !options.tokenizer.empty();
    if (std::filesystem::exists(p / "tokenizer.model") || (explicit_path && std::filesystem::is_regular_file(p)))
      impl->tokenizer = std::make_unique<Tokenizer>(tok_path);
    else if (explicit_path)
      throw Error(tok_path + ": tokenizer not found");
  }

  if (!impl->local()) {
    if (options.server.empty()) throw Error(mode_name(options.mode) + " needs a server (--server HOST:PORT)");
    grpc::ChannelArguments args;
    // Notice a server that died without closing the connection.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    impl->channel = grpc::CreateCustomChannel(options.server, grpc::InsecureChannelCredentials(), args);
    // A refused connection fails at once rather than at the timeout.
    const auto deadline = std::chrono::system_clock::now() + options.connect_timeout;
    grpc_connectivity_state state = impl->channel->GetState(true);
    while (state != GRPC_CHANNEL_READY) {
      if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN)
        throw Error("cannot reach server " + options.server + ": connection failed (is it running? is the address right?)");
      if (!impl->channel->WaitForStateChange(state, deadline))
        throw Error("cannot reach server " + options.server + " within " + std::to_string(options.connect_timeout.count()) +
                    " ms (is it running? is the address right?)");
      state = impl->channel->GetState(true);
    }
    impl->stub = v1::SplitSpec::NewStub(impl->channel);
    impl->info = impl->fetch_info(options.connect_timeout);
    if (!impl->info.serving()) throw Error("server " + options.server + " is shutting down");
    if (options.mode == Mode::kEdgeFsd && impl->info.early_exit_layers().empty())
      throw Error("server " + options.server + " runs no early exits, which edge-fsd needs (its target ships no "
                  "early_exits.json, or early_exits is off): use edge-sd");
    // Refuse a mismatched pair now rather than decode garbage later.
    const int64_t vocab = impl->vocab_size();
    if (impl->draft && vocab != impl->info.vocab_size())
      throw Error("draft " + options.draft_dir + " has vocab_size " + std::to_string(vocab) + " but server " +
                  options.server + " serves a target with " + std::to_string(impl->info.vocab_size()));
    if (impl->tokenizer && !impl->info.tokenizer_fingerprint().empty() &&
        impl->tokenizer->fingerprint() != impl->info.tokenizer_fingerprint())
      throw Error("tokenizer mismatch: ours (" + tok_path + ") has fingerprint " + impl->tokenizer->fingerprint() +
                  ", server " + options.server + "'s target has " + impl->info.tokenizer_fingerprint() +
                  "; draft and target must share one tokenizer");
  }
  if (impl->local() && impl->draft && options.tokenizer.empty() &&
      std::filesystem::exists(std::filesystem::path(options.draft_dir) / "tokenizer.model") && impl->tokenizer &&
      Tokenizer(options.draft_dir).fingerprint() != impl->tokenizer->fingerprint())
    throw Error("tokenizer mismatch: draft " + options.draft_dir + " and target " + options.target_dir +
                " have different tokenizers; draft and target must share one tokenizer");
  if (impl->tokenizer && impl->tokenizer->vocab_size() > impl->vocab_size())
    throw Error(tok_path + ": tokenizer has " + std::to_string(impl->tokenizer->vocab_size()) +
                " pieces but the model's vocabulary has " + std::to_string(impl->vocab_size()));
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

ServerInfo Client::server_info() {
  if (!impl_->stub) throw Error("server_info: this client runs locally, with no server");
  const v1::ServerInfo i = impl_->fetch_info(impl_->options.connect_timeout);
  ServerInfo out;
  out.model_name = i.model_name();
  out.vocab_size = i.vocab_size();
  out.tokenizer_fingerprint = i.tokenizer_fingerprint();
  out.max_context = i.max_context();
  out.max_draft_tokens = i.max_draft_tokens();
  out.active_sessions = i.stats().active_sessions();
  out.version = i.version();
  return out;
}

double Client::ping_ms() {
  if (!impl_->stub) throw Error("ping: this client runs locally, with no server");
  const auto t0 = SteadyClock::now();
  impl_->fetch_info(impl_->options.connect_timeout);
  return ms_between(t0, SteadyClock::now());
}

Result Client::generate(const std::string& prompt, const Request& request,
                        const std::function<void(const std::string&)>& on_text) {
  if (!impl_->tokenizer)
    throw Error(impl_->tokenizer_path.empty() ? "text prompts need a tokenizer: give one (or token ids)"
                                              : (std::filesystem::path(impl_->tokenizer_path) / "tokenizer.model").string() +
                                                    ": tokenizer not found (needed for text prompts; use token ids)");
  std::vector<int32_t> ids = impl_->tokenizer->encode(prompt);
  ids.insert(ids.begin(), impl_->tokenizer->bos_id());
  return impl_->generate(ids, request, {}, on_text);
}

Result Client::generate_ids(const std::vector<int32_t>& prompt_ids, const Request& request,
                            const std::function<void(int32_t)>& on_token) {
  return impl_->generate(prompt_ids, request, on_token, {});
}

Result Client::Impl::generate(const std::vector<int32_t>& prompt_ids, const Request& request,
                              const std::function<void(int32_t)>& on_token,
                              const std::function<void(const std::string&)>& on_text) {
  const GenerateOptions o = to_generate_options(request);
  // One streamer per generation decodes each token once: while generating
  // when text is streamed, else after the clock has stopped. Created at the
  // first token, once the prompt has been accepted.
  std::unique_ptr<TextStreamer> streamer;
  auto push = [&](int32_t id) -> std::string {
    if (!streamer) streamer = std::make_unique<TextStreamer>(*tokenizer, prompt_ids);
    return streamer->push(id);
  };
  std::function<void(int32_t)> each = on_token;
  if (on_text)
    each = [&](int32_t id) {
      if (on_token) on_token(id);
      const std::string piece = push(id);
      if (!piece.empty()) on_text(piece);
    };
  Result r;
  switch (options.mode) {
    case Mode::kLocalAr: r = run_local_ar(prompt_ids, o, each); break;
    case Mode::kLocalSd:
    case Mode::kLocalTree: r = run_local_spec(prompt_ids, request, o, each); break;
    case Mode::kCloudAr: r = run_cloud_ar(prompt_ids, request, o, each); break;
    case Mode::kEdgeSd:
    case Mode::kEdgeFsd: r = run_edge_sd(prompt_ids, request, o, each); break;
  }
  r.prompt_ids = prompt_ids;
  if (tokenizer && !on_text)
    for (int32_t id : r.ids) push(id);
  if (streamer) {
    const std::string tail = streamer->finish();
    if (on_text && !tail.empty()) on_text(tail);
    r.text = streamer->text();
  }
  Stats& s = r.stats;
  s.new_tokens = static_cast<int64_t>(r.ids.size());
  s.ms_per_token = s.new_tokens ? s.wall_ms / static_cast<double>(s.new_tokens) : 0.0;
  if (s.rounds) {
    s.tau = static_cast<double>(s.new_tokens) / static_cast<double>(s.rounds);
    s.network_rtt_ms = (s.verify_wait_ms - s.server_ms) / static_cast<double>(s.rounds);
  }
  return r;
}

Result Client::Impl::run_local_ar(const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                  const std::function<void(int32_t)>& on_token) {
  const auto t0 = SteadyClock::now();
  Result r;
  bool first = true;
  const StreamStats before = stream_stats(*target);
  const Generation g = generate_local_ar(*target, prompt, o, [&](int32_t id) {
    if (first) r.stats.first_token_ms = ms_between(t0, SteadyClock::now());
    first = false;
    if (on_token) on_token(id);
  });
  r.ids = g.output_ids;
  r.finish_reason = g.finish_reason;
  r.stats.wall_ms = ms_between(t0, SteadyClock::now());
  r.stats.target_forwards = g.stats.target_forwards;
  add_stream_stats(*target, before, r.stats);
  return r;
}

Result Client::Impl::run_local_spec(const std::vector<int32_t>& prompt, const Request& req, const GenerateOptions& o,
                                    const std::function<void(int32_t)>& on_token) {
  const auto t0 = SteadyClock::now();
  Result r;
  Stats& s = r.stats;
  bool first = true;
  auto each = [&](int32_t id) {
    if (first) s.first_token_ms = ms_between(t0, SteadyClock::now());
    first = false;
    if (on_token) on_token(id);
  };
  const StreamStats before = stream_stats(*target);
  Generation g;
  DrafterStats ds;
  int64_t drafted = 0;
  if (options.mode == Mode::kLocalSd) {
    SpeculativeGeneration sg = generate_speculative_chain(*target, *draft, prompt, o, req.gamma, each);
    g = std::move(sg.generation);
    ds = sg.spec.draft;
    s.rounds = sg.spec.rounds;
    s.target_ms = sg.spec.target_ms;
    for (int64_t p : ds.proposed) drafted += p;
  } else {
    TreeOptions t;
    t.fallback = options.tree_fallback;
    t.provisional = options.tree_provisional;
    t.tree_nodes = options.tree_nodes;
    t.max_tree_nodes = options.max_tree_nodes;
    t.initial_alpha = options.tree_alpha;
    t.max_provisional = options.max_provisional;
    t.threads = options.threads;
    t.max_children = options.tree_max_children;
    t.draft_width = options.tree_draft_width;
    TreeGeneration tg = generate_local_tree(*target, *draft, prompt, o, t, each);
    g = std::move(tg.generation);
    ds = tg.tree.draft;
    s.rounds = tg.tree.rounds;
    s.target_ms = tg.tree.target_ms;
    s.tree_nodes = tg.tree.mean_tree_nodes;
    s.final_alpha = tg.tree.final_alpha;
    s.provisional_tokens = tg.tree.provisional_tokens;
    s.provisional_kept = tg.tree.provisional_kept;
    drafted = static_cast<int64_t>(tg.tree.mean_tree_nodes * static_cast<double>(tg.tree.rounds) + 0.5);
  }
  r.ids = g.output_ids;
  r.finish_reason = g.finish_reason;
  s.target_forwards = g.stats.target_forwards;
  s.draft_ms = ds.draft_ms;
  s.draft_forwards = ds.forwards;
  s.acceptance_per_position = ds.acceptance_per_position();
  int64_t accepted = 0;
  for (int64_t a : ds.accepted) accepted += a;
  s.acceptance_rate = drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  s.accepted_per_round = s.rounds ? static_cast<double>(accepted) / static_cast<double>(s.rounds) : 0.0;
  add_stream_stats(*target, before, s);
  s.wall_ms = ms_between(t0, SteadyClock::now());
  return r;
}

Result Client::Impl::run_cloud_ar(const std::vector<int32_t>& prompt, const Request& req, const GenerateOptions& o,
                                  const std::function<void(int32_t)>& on_token) {
  const auto t0 = SteadyClock::now();
  const v1::GenerationRequest wire = generation_request(prompt, o);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + req.deadline);
  // A server-streaming read on the caller's thread: nothing else to overlap.
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub->Generate(&ctx, wire);
  Result r;
  v1::GenerateResponse msg;
  std::optional<int32_t> bad_id;
  while (!bad_id && reader->Read(&msg)) {
    if (r.ids.empty()) r.stats.first_token_ms = ms_between(t0, SteadyClock::now());
    for (int32_t id : msg.tokens()) {
      if (id < 0 || id >= vocab_size()) {
        bad_id = id;
        break;
      }
      r.ids.push_back(id);
      if (on_token) on_token(id);
    }
    r.stats.target_forwards += 1;
    r.stats.server_forward_ms += msg.timings().forward_ms();
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) r.finish_reason = finish_reason_name(from_wire(msg.finish_reason()));
  }
  if (bad_id) {
    ctx.TryCancel();
    reader->Finish();
    throw Error("server " + options.server + ": generated token " + std::to_string(*bad_id) + " outside the vocabulary [0, " +
                std::to_string(vocab_size()) + ")");
  }
  const grpc::Status s = reader->Finish();
  if (!s.ok()) throw server_error(options.server, "Generate failed after " + std::to_string(r.ids.size()) + " tokens", s);
  if (r.finish_reason.empty()) {
    if (o.max_new_tokens != 0) throw Error("server " + options.server + ": Generate ended without a finish reason");
    r.finish_reason = finish_reason_name(FinishReason::kLength);
  }
  r.stats.wall_ms = ms_between(t0, SteadyClock::now());
  return r;
}

Result Client::Impl::run_edge_sd(const std::vector<int32_t>& prompt, const Request& req, const GenerateOptions& o,
                                 const std::function<void(int32_t)>& on_token) {
  if (req.gamma < 1) throw Error("gamma must be at least 1");
  if (req.gamma > info.max_draft_tokens())
    throw Error("gamma " + std::to_string(req.gamma) + " exceeds the server's max_draft_tokens of " +
                std::to_string(info.max_draft_tokens()));
  for (int32_t t : prompt)
    if (t < 0 || t >= vocab_size())
      throw Error("prompt token id " + std::to_string(t) + " outside the vocabulary [0, " + std::to_string(vocab_size()) + ")");
  const auto t0 = SteadyClock::now();
  c10::InferenceMode guard;
  Result r;
  Stats& s = r.stats;
  if (o.max_new_tokens == 0) {
    r.finish_reason = finish_reason_name(FinishReason::kLength);
    return r;
  }
  const bool fsd = options.mode == Mode::kEdgeFsd;
  std::unique_ptr<PreDrafter> pre;
  if (fsd)
    pre = std::make_unique<PreDrafter>(*draft, options.predraft_threads, parse_queue_policy(options.predraft_queue), req.gamma,
                                       o.sampling, o.sampling.seed);
  SessionStream::EarlyHandler on_early;
  std::mutex early_mu;
  std::string early_error;  // the first malformed early verdict: it ended the call
  // Each one may cost a pre-draft and its KV cache: a round gets at most one
  // per exit the server runs, as the protocol promises.
  const int exits = info.early_exit_layers_size();
  uint32_t early_round = 0;  // gRPC's reads are sequential: no lock needed
  int early_in_round = 0;
  if (fsd)
    on_early = [&](const v1::RoundVerdict& v) {  // Algorithm 1's RECEIVER
      early_in_round = v.round() == early_round ? early_in_round + 1 : 1;
      early_round = v.round();
      std::string bad = malformed_verdict(v, req.gamma, vocab_size());
      if (bad.empty() && early_in_round > exits)
        bad = "more than one per exit (the server runs " + std::to_string(exits) + ")";
      if (!bad.empty()) {
        std::lock_guard<std::mutex> lock(early_mu);
        if (early_error.empty())
          early_error = "server " + options.server + ": malformed early verdict for round " + std::to_string(v.round()) +
                        ": " + bad;
        return false;
      }
      pre->push(v.round(), std::vector<int32_t>(v.tokens().begin(), v.tokens().end()), v.accepted(), v.confidence(),
                v.exit_layer());
      return true;
    };
  SessionStream stream(*stub, std::chrono::system_clock::now() + req.deadline, on_early);
  {
    v1::SessionRequest open;
    *open.mutable_open() = generation_request(prompt, o);
    open.mutable_open()->set_early_verdicts(fsd);
    stream.send(std::move(open));
  }
  // The server checks the prompt too; checking here first means the draft
  // never prefills a prompt that is going to be refused anyway.
  if (static_cast<int64_t>(prompt.size()) >= info.max_context())
    throw Error("prompt of " + std::to_string(prompt.size()) + " tokens does not fit the target's context of " +
                std::to_string(info.max_context()) + " with room to generate");
  ModelDrafter drafter(*draft);
  drafter.begin(prompt);
  Rng rng(draft_seed(o.sampling.seed));
  const int64_t context = info.max_context();
  auto fail = [&](const std::string& what) -> Error {
    const grpc::Status st = stream.status();
    {
      std::lock_guard<std::mutex> lock(early_mu);
      if (!early_error.empty()) return Error(early_error);
    }
    if (st.ok()) return Error("server " + options.server + ": " + what);
    return server_error(options.server, what, st);
  };

  uint32_t round = 0;
  std::optional<SteadyClock::time_point> last_sent;  // the previous round's draft
  PredraftSwitch::Choice last_choice;
  int64_t last_tokens = 0;
  std::optional<DraftTree> predrafted;          // the next round's draft, from the pre-draft cache
  std::optional<SteadyClock::time_point> final_at;  // when the last final verdict arrived
  int64_t hit_sends = 0, miss_sends = 0;
  while (true) {
    const int64_t room = context - static_cast<int64_t>(drafter.sequence().size());
    const int32_t k = static_cast<int32_t>(std::min<int64_t>(req.gamma, std::max<int64_t>(room, 0)));
    DraftTree tree;
    if (predrafted) {
      tree = std::move(*predrafted);
      if (tree.size() > k) {  // near the context's end: send what fits
        tree.tokens.resize(k);
        tree.parents.resize(k);
        if (!tree.q.empty()) tree.q.resize(k);
      }
    } else {
      tree = drafter.draft(k, o.sampling, rng);
    }
    const bool hit = predrafted.has_value();
    predrafted.reset();
    // Without the switch every edge-fsd round pre-drafts and none is a sample.
    PredraftSwitch::Choice choice{pre != nullptr, false};
    if (pre && options.predraft_adaptive) choice = predraft_switch.next();
    const bool use = choice.use;
    // Before the send: early verdicts of this round may arrive at once.
    if (use) pre->begin_round(round + 1, drafter);
    v1::SessionRequest msg;
    v1::Draft* d = msg.mutable_draft();
    d->set_round(++round);
    d->mutable_tokens()->Add(tree.tokens.begin(), tree.tokens.end());
    for (const Distribution& q : tree.q) *d->add_q() = sparse(q);
    d->set_early_verdicts(use);
    const auto sent = SteadyClock::now();
    stream.send(std::move(msg));
    if (last_sent) predraft_switch.observe(last_choice, ms_between(*last_sent, sent), last_tokens);
    last_sent = sent;
    last_choice = choice;
    if (use) s.predraft_rounds += 1;
    if (final_at) {
      (hit ? s.hit_send_ms : s.miss_send_ms) += ms_between(*final_at, sent);
      (hit ? hit_sends : miss_sends) += 1;
    }

    std::optional<v1::SessionResponse> resp;
    do {
      resp = stream.next();
      if (!resp) throw fail("the session ended in round " + std::to_string(round));
    } while (resp->has_opened());
    const auto got = SteadyClock::now();
    if (!resp->has_verdict()) throw fail("unexpected message in round " + std::to_string(round));
    const v1::RoundVerdict& v = resp->verdict();
    if (v.round() != round)
      throw Error("server " + options.server + ": verdict for round " + std::to_string(v.round()) + " in round " +
                  std::to_string(round));
    const std::string bad = malformed_verdict(v, tree.size(), vocab_size());
    if (!bad.empty()) throw Error("server " + options.server + ": malformed verdict for round " + std::to_string(round) + ": " + bad);
    for (int i = 0; i < v.accepted() && i < v.tokens_size(); ++i)
      if (v.tokens(i) != tree.tokens[i]) throw Error("server " + options.server + ": verdict contradicts the draft");

    s.rounds += 1;
    s.verify_wait_ms += ms_between(sent, got);
    s.server_ms += v.timings().queue_ms() + v.timings().forward_ms() + v.timings().verify_ms();
    s.server_forward_ms += v.timings().forward_ms();
    s.server_exits_ms += v.timings().exits_ms();
    if (r.ids.empty()) s.first_token_ms = ms_between(t0, got);
    const std::vector<int32_t> tokens(v.tokens().begin(), v.tokens().end());
    const bool finished = v.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
    last_tokens = static_cast<int64_t>(tokens.size());
    if (use && !finished) predrafted = pre->take(tokens, v.accepted(), drafter);
    if (!predrafted) drafter.accept(tokens, v.accepted());
    final_at = got;
    for (int32_t id : tokens) {
      r.ids.push_back(id);
      if (on_token) on_token(id);
    }
    if (finished) {
      r.finish_reason = finish_reason_name(from_wire(v.finish_reason()));
      break;
    }
  }
  if (pre) {
    pre->stop();
    const PredraftStats ps = pre->stats();
    s.early_verdicts = ps.early_verdicts;
    s.predrafts = ps.predrafts;
    s.predraft_lookups = ps.rounds;
    s.predraft_hits = ps.hits;
    s.cache_miss_rate = ps.rounds ? 1.0 - static_cast<double>(ps.hits) / static_cast<double>(ps.rounds) : 0.0;
    s.avg_exit_layer = ps.hits ? static_cast<double>(ps.exit_layer_sum) / static_cast<double>(ps.hits) : 0.0;
    s.predraft_ms = ps.predraft_ms;
    s.sync_wait_ms = ps.wait_ms;
  }
  if (hit_sends) s.hit_send_ms /= static_cast<double>(hit_sends);
  if (miss_sends) s.miss_send_ms /= static_cast<double>(miss_sends);
  if (!stream.status().ok()) throw fail("session ended badly");
  const DrafterStats& ds = drafter.stats();
  s.target_forwards = s.rounds;
  s.draft_ms = ds.draft_ms;
  s.draft_forwards = ds.forwards;
  s.acceptance_per_position = ds.acceptance_per_position();
  int64_t proposed = 0, accepted = 0;
  for (size_t i = 0; i < ds.proposed.size(); ++i) {
    proposed += ds.proposed[i];
    accepted += ds.accepted[i];
  }
  s.acceptance_rate = proposed ? static_cast<double>(accepted) / static_cast<double>(proposed) : 0.0;
  s.wall_ms = ms_between(t0, SteadyClock::now());
  return r;
}

}  // namespace splitspec

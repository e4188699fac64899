#include "client/client.h"

#include <filesystem>
#include <limits>
#include <optional>

#include "client/local_verifier.h"
#include "client/request_options.h"
#include "client/resilient_verifier.h"
#include "client/round_loop.h"
#include "client/server_generate.h"
#include "client/server_link.h"
#include "client/tokenizer_fetch.h"
#include "client/server_verifier.h"
#include "common/backend/cpu_backend.h"
#include "common/backend/registry.h"
#include "common/decoding/forward_emulation.h"
#include "common/drafting/registry.h"
#include "common/kernels/threads.h"
#include "common/kernels/weight_type.h"
#include "common/model/model.h"
#include "common/tokenizer/chat_template.h"
#include "common/tokenizer/stop_strings.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/error.h"
#include "common/util/stopwatch.h"
#include <spdlog/spdlog.h>

namespace splitspec {

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

VerifierKind parse_verifier(const std::string& name) {
  if (name == "local") return VerifierKind::kLocal;
  if (name == "server") return VerifierKind::kServer;
  throw Error("unknown verifier '" + name + "' (local or server)");
}

std::string verifier_name(VerifierKind kind) { return kind == VerifierKind::kLocal ? "local" : "server"; }

namespace {

struct Alias {
  Mode mode;
  const char* name;
  VerifierKind verifier;
  const char* drafter;
  bool predraft;
};

constexpr Alias kAliases[] = {
    {Mode::kCloudAr, "cloud-ar", VerifierKind::kServer, "none", false},
    {Mode::kEdgeSd, "edge-sd", VerifierKind::kServer, "model", false},
    {Mode::kEdgeFsd, "edge-fsd", VerifierKind::kServer, "model", true},
    {Mode::kLocalAr, "local-ar", VerifierKind::kLocal, "none", false},
    {Mode::kLocalSd, "local-sd", VerifierKind::kLocal, "model", false},
    {Mode::kLocalTree, "local-tree", VerifierKind::kLocal, "model-tree", false},
};

// The options with an alias resolved into its choices.
ClientOptions resolved(const ClientOptions& o) { return o.mode ? with_mode(o, *o.mode) : o; }

// `type`: converted to it at load (ClientOptions::dtype).
std::shared_ptr<Model> load_weights(const ClientOptions& o, const std::string& dir, std::optional<WType> type) {
  if (o.memory_budget.empty()) return Model::load(dir, type);
  if (type)
    throw Error("dtype converts weights held in memory; a memory budget streams them as stored: write the type with "
                "splitspec convert --dtype " + o.dtype + " --out DIR first");
  StreamOptions s;
  const uint64_t whole = stored_weight_bytes(dir);
  s.budget_bytes = parse_bytes(o.memory_budget, whole);
  s.pipeline = o.stream_pipeline;
  if (!o.stream_read_ahead.empty()) s.read_ahead_bytes = parse_bytes(o.stream_read_ahead, whole);
  return Model::load_streamed(dir, s);
}

std::shared_ptr<Model> load_local_target(const ClientOptions& o, const std::string& dir, KVType kv,
                                         std::optional<WType> type) {
  std::shared_ptr<Model> m = load_weights(o, dir, type);
  m->set_kv_type(kv);
  return m;
}

KVType options_kv_type(const ClientOptions& o) { return o.kv_cache.empty() ? KVType::F32 : parse_kv_type(o.kv_cache); }

std::optional<WType> options_weight_type(const ClientOptions& o) {
  return o.dtype.empty() ? std::nullopt : std::optional<WType>(parse_weight_type(o.dtype));
}

// The local verifier's target on its device.
std::shared_ptr<const Backend> local_backend(const ClientOptions& o) {
  const Device device = parse_device(o.device.empty() ? "cpu" : o.device);
  if (device.cpu())
    return std::make_shared<CpuBackend>(load_local_target(o, o.target_dir, options_kv_type(o), options_weight_type(o)));
  if (!o.memory_budget.empty())
    throw Error("memory_budget streams the target's weights from disk to the CPU; device " + device.str() +
                " holds the whole model: drop one of them");
  return open_backend(o.target_dir, {device, options_kv_type(o), options_weight_type(o)});
}

}  // namespace

ClientOptions with_mode(ClientOptions o, Mode mode) {
  for (const Alias& a : kAliases)
    if (a.mode == mode) {
      o.verifier = a.verifier;
      o.drafter = a.drafter;
      o.predraft = a.predraft;
    }
  o.mode.reset();
  return o;
}

ClientOptions with_mode(ClientOptions o, const std::string& name) {
  for (const Alias& a : kAliases)
    if (name == a.name) return with_mode(std::move(o), a.mode);
  // VERIFIER+DRAFTER[+predraft]; a drafter's name may hold '+' only at its end.
  const size_t plus = name.find('+');
  if (plus == std::string::npos)
    throw Error("unknown mode '" + name + "' (an alias: cloud-ar, edge-sd, edge-fsd, local-ar, local-sd, local-tree; or "
                "VERIFIER+DRAFTER[+predraft], e.g. server+model-tree)");
  o.verifier = parse_verifier(name.substr(0, plus));
  std::string drafter = name.substr(plus + 1);
  o.predraft = drafter.size() > 9 && drafter.compare(drafter.size() - 9, 9, "+predraft") == 0;
  if (o.predraft) drafter.resize(drafter.size() - 9);
  o.drafter = drafter;
  o.mode.reset();
  return o;
}

Mode parse_mode(const std::string& name) {
  for (const Alias& a : kAliases)
    if (name == a.name) return a.mode;
  throw Error("unknown mode '" + name + "' (cloud-ar, edge-sd, edge-fsd, local-ar, local-sd or local-tree)");
}

std::string mode_name(Mode mode) {
  for (const Alias& a : kAliases)
    if (a.mode == mode) return a.name;
  return "";
}

std::string mode_name(const ClientOptions& options) {
  const ClientOptions o = resolved(options);
  for (const Alias& a : kAliases)
    if (a.verifier == o.verifier && o.drafter == a.drafter && a.predraft == o.predraft) return a.name;
  return verifier_name(o.verifier) + "+" + o.drafter + (o.predraft ? "+predraft" : "");
}

struct Client::Impl {
  ClientOptions options;  // resolved: no alias
  std::string label;      // mode_name(options), for messages
  DrafterInfo drafter;
  DrafterSpec spec;
  std::shared_ptr<const Backend> target;  // local verifier
  std::unique_ptr<ServerLink> link;
  // The server's target here, for when it is unreachable: on the CPU, its
  // KV cache type set to the server's once that is known.
  std::shared_ptr<Model> fallback_model;
  std::shared_ptr<const Backend> fallback;
  // How its arithmetic differs from the server's (empty: it does not, or
  // the server is not reached yet); set on the generation's thread.
  mutable std::string numerics_differ;
  v1::ServerInfo fallback_own;  // what the fallback says of itself (fallback_identity, computed once)
  std::unique_ptr<Verifier> verifier;  // null for the server's own streaming loop
  ResilientVerifier* resilient = nullptr;  // the server verifier, when it is one
  Cancellation cancel;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string tokenizer_path;  // where it was looked for
  std::string tokenizer_note;  // why the server's could not be fetched
  int64_t vocab = 0;
  // Across generations: what pre-drafting is worth depends on the link and
  // the machines, not on the prompt, so it is learned once per client.
  PredraftSwitch predraft_switch;

  // Plain decoding on the server runs its own loop, unless a fallback target
  // must be able to take over a round.
  bool server_streams() const {
    return options.verifier == VerifierKind::kServer && drafter.has(kDraftsNothing) && options.fallback_target_dir.empty();
  }
  std::string fingerprint() const { return tokenizer ? tokenizer->fingerprint() : ""; }
  // What connecting refuses of a server: a target the draft or the drafter
  // cannot work with. An offline-started client asks it when it first
  // reaches the server.
  void check_server(const ExtrasRequest& wants, const v1::ServerInfo& info) const;

  // Both leave the cancel flag as the caller set it.
  Result generate(const std::vector<int32_t>& prompt_ids, const Request& request, const OnToken& on_token,
                  const OnText& on_text);
  Result generate_text(const std::string& prompt, const Request& request, const OnText& on_text);
  Result run_rounds(const std::vector<int32_t>& prompt, const Request& request, const GenerateOptions& o,
                    const std::function<bool(int32_t)>& on_token);
  Result run_streamed(const std::vector<int32_t>& prompt, const Request& request, const GenerateOptions& o,
                      const std::function<bool(int32_t)>& on_token);
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

namespace {

// A combination that cannot work is an error, never a silent fallback.
void check_combination(const ClientOptions& o, const DrafterInfo& d, const std::string& label) {
  const bool local = o.verifier == VerifierKind::kLocal;
  if (o.predraft && local)
    throw Error(label + ": pre-drafting needs the server verifier: early verdicts come from the server's early exits");
  if (o.predraft && d.has(kDraftsNothing))
    throw Error(label + ": pre-drafting needs a drafter; " + d.name + " drafts nothing");
  if (!local && !o.memory_budget.empty() && o.fallback_target_dir.empty())
    throw Error(label + ": a memory budget streams the local target; the server verifier has none here "
                "(unless a fallback target is given)");
  if (local && !o.fallback_target_dir.empty())
    throw Error(label + ": a fallback target stands in for the server; the local verifier has its target already");
  if (!o.kv_cache.empty()) parse_kv_type(o.kv_cache);
  if (!o.device.empty() && !parse_device(o.device).cpu() && !local)
    throw Error(label + ": device sets where the local target computes; a server computes where its own --device says");
  if (!local && !o.kv_cache.empty() && o.fallback_target_dir.empty())
    throw Error(label + ": kv_cache sets the local target's cache; the server's is its own kv_cache setting");
  if (o.reconnect_budget.count() < 0) throw Error(label + ": reconnect_budget must be >= 0");
  if (o.failback_interval.count() <= 0) throw Error(label + ": failback_interval must be > 0");
  if (!(o.emulate_draft_factor >= 1 && o.emulate_draft_factor <= 1000))
    throw Error(label + ": emulate_draft_factor must be in [1, 1000] (1: the real device)");
  if (local && o.target_dir.empty()) throw Error(label + " needs a target model (--target DIR)");
  if (!local && o.server.empty()) throw Error(label + " needs a server (--server HOST:PORT)");
  if (d.has(kNeedsDraftModel) && o.draft_dir.empty()) throw Error(label + " needs a draft model (--draft DIR)");
  if (o.predraft) parse_queue_policy(o.predraft_queue);
  if (!o.dtype.empty()) parse_weight_type(o.dtype);
}

}  // namespace

namespace {

// What an offline-started link says of the server until it is reached: the
// fallback's own identity, which the server must then match.
v1::ServerInfo fallback_identity(const ClientOptions& o, const Backend& m) {
  v1::ServerInfo i;
  i.set_vocab_size(static_cast<int32_t>(m.config().vocab_size));
  i.set_hidden_size(static_cast<int32_t>(m.config().hidden_size));
  i.set_max_context(static_cast<int32_t>(m.config().max_position_embeddings));
  // No limit of the server's yet: the fallback's budget governs until the
  // server's own takes over (a larger round drafted before is verified here).
  i.set_max_draft_tokens(std::numeric_limits<int32_t>::max());
  if (tokenizer_available(o.fallback_target_dir))
    i.set_tokenizer_fingerprint(Tokenizer(o.fallback_target_dir).fingerprint());
  const Numerics n = m.numerics();
  i.set_weight_type(n.weight_type);
  i.set_weights_digest(n.weights_digest);
  i.set_backend(n.backend);
  i.set_backend_arch(n.arch);
  i.set_kernels_version(n.kernels);
  i.set_device(m.device());
  i.set_kv_cache(kv_type_name(options_kv_type(o)));
  i.set_serving(true);
  return i;
}

// How two targets' arithmetic differs (ServerInfo's backend, arch and kernels
// version), named; empty when they compute alike. A server that does not say
// is a CPU one of unknown arithmetic: only what both say is compared.
std::string arithmetic_differences(const v1::ServerInfo& a, const v1::ServerInfo& b) {
  std::string out;
  auto field = [&](const char* what, const std::string& x, const std::string& y) {
    if (x.empty() || y.empty() || x == y) return;
    out += (out.empty() ? "" : ", ") + std::string(what) + " " + x + " vs " + y;
  };
  field("backend", a.backend().empty() ? "cpu" : a.backend(), b.backend().empty() ? "cpu" : b.backend());
  field("arch", a.backend_arch(), b.backend_arch());
  field("kernels", a.kernels_version(), b.kernels_version());
  return out;
}

// A fallback whose arithmetic is not the server's: refused under
// strict_numerics, else a warning; returns the differences (empty: none).
std::string check_numerics(const ClientOptions& o, const v1::ServerInfo& info, const v1::ServerInfo& own) {
  const std::string diff = arithmetic_differences(own, info);
  if (diff.empty()) return diff;
  const std::string what = "fallback target " + o.fallback_target_dir + " computes with other numerics than server " +
                           o.server + " (" + diff + "; here " + own.device() + ", there " +
                           (info.device().empty() ? "unnamed" : info.device()) + ")";
  if (o.strict_numerics)
    throw Error(what + ": --strict-numerics refuses the pairing (run the fallback where the server's numerics are, or "
                "drop the flag to fail over with tokens that may differ from the server's after a failover)");
  spdlog::warn("{}: a failover goes on, but greedy tokens after it may differ from the server's alone; generations it "
               "verifies are marked mixed_numerics (--strict-numerics refuses this)",
               what);
  return diff;
}

// The server's target, here: a fallback that verified with another model
// would change the output, so it must be the same one. `own` is the
// fallback's identity (fallback_identity), computed once: its weights digest
// reads every tensor. It goes on with the server's KV cache type.
void check_fallback(const ClientOptions& o, const v1::ServerInfo& info, const v1::ServerInfo& own, Model& m) {
  const KVType server_kv = info.kv_cache().empty() ? KVType::F32 : parse_kv_type(info.kv_cache());
  if (!o.kv_cache.empty() && parse_kv_type(o.kv_cache) != server_kv)
    throw Error(std::string("kv_cache ") + o.kv_cache + " is not server " + o.server + "'s (" + kv_type_name(server_kv) +
                "): a fallback target goes on with the server's cache type, or its tokens would differ");
  if (own.vocab_size() != info.vocab_size() || (info.hidden_size() > 0 && own.hidden_size() != info.hidden_size()))
    throw Error("fallback target " + o.fallback_target_dir + " (vocab_size " + std::to_string(own.vocab_size()) +
                ", hidden_size " + std::to_string(own.hidden_size()) + ") is not server " + o.server + "'s target (" +
                std::to_string(info.vocab_size()) + ", " + std::to_string(info.hidden_size()) + ")");
  if (!info.tokenizer_fingerprint().empty() && !own.tokenizer_fingerprint().empty() &&
      own.tokenizer_fingerprint() != info.tokenizer_fingerprint())
    throw Error("fallback target " + o.fallback_target_dir + " has another tokenizer than server " + o.server +
                "'s target; it must be the same model");
  // Same shape and tokenizer is not enough: a Q4_0 copy of an F16 target
  // gives other tokens after a failover. The type is compared too, so an
  // older server that sends no digest still cannot pass another type.
  const bool types_differ =
      !info.weight_type().empty() && !own.weight_type().empty() && own.weight_type() != info.weight_type();
  if (types_differ ||
      (!info.weights_digest().empty() && !own.weights_digest().empty() && own.weights_digest() != info.weights_digest()))
    throw Error("fallback target " + o.fallback_target_dir + " (" + own.weight_type() + ", weights digest " +
                own.weights_digest() + ") is not the weights server " + o.server + " verifies with (" +
                info.weight_type() + ", digest " + info.weights_digest() + "): give the same file at the same --dtype, "
                "or its tokens would differ after a failover");
  m.set_kv_type(server_kv);
}

}  // namespace

void Client::Impl::check_server(const ExtrasRequest& wants, const v1::ServerInfo& info) const {
  const ClientOptions& o = options;
  if (o.predraft && info.early_exit_layers().empty())
    throw Error("server " + o.server + " runs no early exits, which pre-drafting (" + label +
                ") needs (its target ships no early_exits.json, or early_exits is off): drop it (edge-sd)");
  if (wants.hidden_rows && !info.verdict_hidden_rows())
    throw Error("server " + o.server + " does not send the target's hidden rows, which drafter " + o.drafter +
                " reads (its version " + info.version() + ", backend '" + info.backend() +
                "'): run it with a local target or against a CPU server of this version");
  if (!wants.kv_row_layers.empty())
    throw Error("drafter " + o.drafter + " attends over the target's own keys and values, which a server does not "
                "send: run it with a local target (its bytes a round: docs/draft-heads.md)");
  // Refuse a mismatched pair now rather than decode garbage later.
  if (spec.draft && spec.draft->config().vocab_size != info.vocab_size())
    throw Error("draft " + o.draft_dir + " has vocab_size " + std::to_string(spec.draft->config().vocab_size) +
                " but server " + o.server + " serves a target with " + std::to_string(info.vocab_size()));
  if (tokenizer && !info.tokenizer_fingerprint().empty() &&
      tokenizer->fingerprint() != info.tokenizer_fingerprint())
    throw Error("tokenizer mismatch: ours (" + tokenizer_path + ") has fingerprint " +
                tokenizer->fingerprint() + ", server " + o.server + "'s target has " +
                info.tokenizer_fingerprint() + "; draft and target must share one tokenizer");
  if (wants.hidden && info.hidden_size() == 0)
    throw Error(label + ": drafter " + o.drafter + " drafts from the target's hidden state, which server " +
                o.server + " does not send (it reports no hidden_size: an older release)");
  if (wants.top_k > info.max_verdict_top_k())
    throw Error(label + ": drafter " + o.drafter + " asks for the target's top " + std::to_string(wants.top_k) +
                " with each verdict, but server " + o.server + " sends at most " +
                std::to_string(info.max_verdict_top_k()) + " (its max_verdict_top_k)");
}

std::unique_ptr<Client> Client::connect(const ClientOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = resolved(options);
  const ClientOptions& o = impl->options;
  impl->label = mode_name(o);
  impl->drafter = find_drafter(o.drafter);
  check_combination(o, impl->drafter, impl->label);
  set_compute_threads(o.threads);
  const bool local = o.verifier == VerifierKind::kLocal;

  std::string tok_path = o.tokenizer;
  if (tok_path.empty()) tok_path = local ? o.target_dir : o.draft_dir;
  if (impl->drafter.has(kNeedsDraftModel)) impl->spec.draft = Model::load(o.draft_dir, options_weight_type(o));
  if (local) {
    impl->target = local_backend(o);
    if (impl->spec.draft && impl->spec.draft->config().vocab_size != impl->target->config().vocab_size)
      throw Error("draft " + o.draft_dir + " has vocab_size " + std::to_string(impl->spec.draft->config().vocab_size) +
                  " but target " + o.target_dir + " has " + std::to_string(impl->target->config().vocab_size));
  }
  impl->tokenizer_path = tok_path;
  if (!tok_path.empty()) {
    const std::filesystem::path p(tok_path);
    const bool explicit_path = !o.tokenizer.empty();
    if (tokenizer_available(tok_path))
      impl->tokenizer = std::make_unique<Tokenizer>(tok_path);
    else if (explicit_path)
      throw Error(tok_path + ": tokenizer not found");
  }

  if (!local) {
    if (o.fallback_target_dir.empty()) {
      impl->link = std::make_unique<ServerLink>(o.server, o.connect_timeout, link_security(o));
    } else {
      // The server's target as stored: its digest must be the server's.
      impl->fallback_model = load_local_target(o, o.fallback_target_dir, options_kv_type(o), std::nullopt);
      impl->fallback = std::make_shared<CpuBackend>(impl->fallback_model);
      impl->fallback_own = fallback_identity(o, *impl->fallback);
      const v1::ServerInfo& own = impl->fallback_own;
      impl->link = std::make_unique<ServerLink>(o.server, o.connect_timeout, link_security(o), own);
      if (impl->link->confirmed()) check_fallback(o, impl->link->info(), own, *impl->fallback_model);
    }
  }
  // No tokenizer here: the server's, fetched once and kept by fingerprint.
  if (!local && !impl->tokenizer && o.tokenizer.empty() && impl->link->confirmed()) {
    try {
      impl->tokenizer_path = fetch_server_tokenizer(*impl->link, tokenizer_cache_dir(), o.connect_timeout + std::chrono::seconds(30));
      impl->tokenizer = std::make_unique<Tokenizer>(impl->tokenizer_path);
    } catch (const Error& e) {
      // Token ids still work; a text prompt says why it cannot.
      impl->tokenizer_note = e.what();
      spdlog::warn("event=tokenizer_not_fetched error=\"{}\"", e.what());
    }
  }
  if (local && impl->spec.draft && o.tokenizer.empty() &&
      tokenizer_available(o.draft_dir) && impl->tokenizer &&
      Tokenizer(o.draft_dir).fingerprint() != impl->tokenizer->fingerprint())
    throw Error("tokenizer mismatch: draft " + o.draft_dir + " and target " + o.target_dir +
                " have different tokenizers; draft and target must share one tokenizer");
  impl->vocab = impl->spec.draft    ? impl->spec.draft->config().vocab_size
                : impl->target      ? impl->target->config().vocab_size
                                    : impl->link->info().vocab_size();
  if (impl->tokenizer && impl->tokenizer->vocab_size() > impl->vocab)
    throw Error(tok_path + ": tokenizer has " + std::to_string(impl->tokenizer->vocab_size()) +
                " pieces but the model's vocabulary has " + std::to_string(impl->vocab));

  DrafterSpec& spec = impl->spec;
  spec.options = o.drafter_options;
  // A drafter's own worker threads (model-tree's provisional drafting) run
  // beside the target's forward: one each unless asked for more.
  spec.threads = o.threads > 0 ? o.threads : 1;
  spec.verify_cost = !local                     ? VerifyCost::kRoundTrip
                     : o.memory_budget.empty()  ? VerifyCost::kCompute
                                                : VerifyCost::kWeightReads;
  spec.vocab_size = impl->vocab;
  spec.hidden_size = impl->target ? impl->target->config().hidden_size : impl->link->info().hidden_size();
  spec.target_dir = local ? model_side_dir(o.target_dir) : std::filesystem::is_directory(tok_path) ? tok_path : "";
  spec.target_path = local ? o.target_dir : tok_path;
  spec.tokenizer_fingerprint = impl->fingerprint();
  // Built once here so that bad settings fail now, not at the first request.
  const std::unique_ptr<Drafter> probe = impl->drafter.make(spec);
  if (o.predraft && !probe->can_fork())
    throw Error(impl->label + ": pre-drafting needs a drafter that can fork; " + o.drafter + " cannot");
  if (impl->link) {
    const Client::Impl* checked = impl.get();
    auto check = [checked, wants = probe->wants()](const v1::ServerInfo& info) {
      checked->check_server(wants, info);
      // At connect, or when an offline start first meets the server.
      if (checked->fallback) checked->numerics_differ = check_numerics(checked->options, info, checked->fallback_own);
    };
    if (impl->link->confirmed())
      check(impl->link->info());
    else
      impl->link->on_confirm(check);
  }

  if (local)
    impl->verifier = std::make_unique<LocalVerifier>(impl->target);
  else if (!impl->server_streams()) {
    auto resilient = std::make_unique<ResilientVerifier>(
        *impl->link, std::make_unique<ServerVerifier>(*impl->link, impl->vocab, impl->fingerprint()),
        impl->fallback ? std::make_unique<LocalVerifier>(impl->fallback) : nullptr, o.reconnect_budget,
        o.failback_interval);
    impl->resilient = resilient.get();
    impl->verifier = std::move(resilient);
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

ServerInfo Client::server_info() {
  if (!impl_->link) throw Error("server_info: this client verifies locally, with no server");
  const v1::ServerInfo i = impl_->link->fetch_info(impl_->options.connect_timeout);
  ServerInfo out;
  out.model_name = i.model_name();
  out.vocab_size = i.vocab_size();
  out.tokenizer_fingerprint = i.tokenizer_fingerprint();
  out.max_context = i.max_context();
  out.max_draft_tokens = i.max_draft_tokens();
  out.active_sessions = i.stats().active_sessions();
  out.version = i.version();
  out.kv_cache = i.kv_cache().empty() ? "f32" : i.kv_cache();
  out.weight_type = i.weight_type();
  out.weights_digest = i.weights_digest();
  out.emulated_forward_ms = i.emulated_forward_ms();
  out.backend = i.backend().empty() ? "cpu" : i.backend();
  out.device = i.device();
  return out;
}

double Client::ping_ms() {
  if (!impl_->link) throw Error("ping: this client verifies locally, with no server");
  const auto t0 = SteadyClock::now();
  impl_->link->fetch_info(impl_->options.connect_timeout);
  return ms_between(t0, SteadyClock::now());
}

Result Client::generate(const std::string& prompt, const Request& request, const OnText& on_text) {
  impl_->cancel.reset();
  return impl_->generate_text(prompt, request, on_text);
}

Result Client::generate_ids(const std::vector<int32_t>& prompt_ids, const Request& request, const OnToken& on_token) {
  impl_->cancel.reset();
  return impl_->generate(prompt_ids, request, on_token, {});
}

void Client::cancel() { impl_->cancel.request(); }

// The flag is cleared here, on the caller's thread: a cancel() right after
// this returns reaches the generation however late its thread starts.
Generation Client::generate_async(const std::string& prompt, const Request& request, OnText on_text) {
  impl_->cancel.reset();
  return Generation(this, std::async(std::launch::async, [impl = impl_.get(), prompt, request, on_text] {
                      return impl->generate_text(prompt, request, on_text);
                    }));
}

Generation Client::generate_ids_async(const std::vector<int32_t>& prompt_ids, const Request& request, OnToken on_token) {
  impl_->cancel.reset();
  return Generation(this, std::async(std::launch::async, [impl = impl_.get(), prompt_ids, request, on_token] {
                      return impl->generate(prompt_ids, request, on_token, {});
                    }));
}

void Generation::finish() noexcept {
  if (result_.valid()) {
    cancel();
    result_.wait();
  }
}

Generation::~Generation() { finish(); }

Generation& Generation::operator=(Generation&& other) noexcept {
  if (this != &other) {
    finish();
    client_ = other.client_;
    result_ = std::move(other.result_);
  }
  return *this;
}

bool Generation::done() const { return wait_for(std::chrono::milliseconds(0)); }

bool Generation::wait_for(std::chrono::milliseconds timeout) const {
  if (!result_.valid()) throw Error("this generation's result was taken already");
  return result_.wait_for(timeout) == std::future_status::ready;
}

Result Generation::get() {
  if (!result_.valid()) throw Error("this generation's result was taken already");
  return result_.get();
}

void Generation::cancel() {
  if (client_ && result_.valid()) client_->cancel();
}

namespace {

std::string names(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

Result Client::Impl::generate_text(const std::string& prompt, const Request& request, const OnText& on_text) {
  if (!tokenizer)
    throw Error(!tokenizer_note.empty()
                    ? "text prompts need a tokenizer, and the server's could not be fetched (" + tokenizer_note +
                          "): give the target's with --tokenizer PATH (ClientOptions::tokenizer), or token ids"
                : tokenizer_path.empty()
                    ? "text prompts need a tokenizer: give the target's with --tokenizer PATH (ClientOptions::tokenizer), "
                      "or token ids"
                    : tokenizer_path + ": no tokenizer found (tokenizer.gguf, tokenizer.model or tokenizer.json; needed "
                                       "for text prompts): give one with --tokenizer PATH, or token ids");
  std::string text = prompt;
  if (!request.messages.empty()) {
    if (!prompt.empty()) throw Error("give a prompt or messages, not both");
    std::string name = options.chat_template;
    if (name.empty()) {
      const std::string source = tokenizer->chat_template();
      if (source.empty())
        throw Error(tokenizer_path + ": the model names no chat template; give one (--chat-template NAME: " +
                    names(chat_template_names()) + ")");
      name = source;
    }
    std::vector<ChatMessage> messages;
    for (const Message& m : request.messages) messages.push_back({m.role, m.content});
    text = apply_chat_template(name, messages, true);
  }
  // As llama.cpp tokenizes a prompt: BOS if the vocabulary adds one, and the
  // texts of special tokens (<|im_start|>) as those tokens.
  return generate(tokenizer->tokenize(text, true, true), request, {}, on_text);
}

Result Client::Impl::generate(const std::vector<int32_t>& prompt_ids, const Request& request, const OnToken& on_token,
                              const OnText& on_text) {
  const GenerateOptions o = to_generate_options(request);
  if (request.round_timeout.count() < 0) throw Error("round_timeout must be >= 0");
  if (resilient) resilient->set_round_timeout(request.round_timeout);
  // One streamer per generation decodes each token once: while generating
  // when text is streamed, else after the clock has stopped. Created at the
  // first token, once the prompt has been accepted.
  std::unique_ptr<TextStreamer> streamer;
  auto push = [&](int32_t id) -> std::string {
    if (!streamer) streamer = std::make_unique<TextStreamer>(*tokenizer, prompt_ids);
    return streamer->push(id);
  };
  const bool stops = !request.stop.empty();
  if (stops && !tokenizer) throw Error("stop strings need a tokenizer");
  for (const std::string& stop : request.stop)
    if (stop.empty()) throw Error("a stop string must not be empty");
  // Text that may be the start of a stop string waits until it is not.
  StopMatcher matcher(request.stop);
  int64_t pushed = 0, stopped_at = -1;
  std::function<bool(int32_t)> each;
  if (on_token) each = [&](int32_t id) { return on_token(id); };
  if (on_text || stops)
    each = [&](int32_t id) {
      if (on_token && !on_token(id)) return false;
      std::string piece = push(id);
      ++pushed;
      if (stops) {
        bool hit = false;
        piece = matcher.feed(piece, &hit);
        if (hit) stopped_at = pushed;
        if (on_text && !piece.empty() && !on_text(piece)) return false;
        return !hit;
      }
      return piece.empty() || on_text(piece);
    };
  Result r = server_streams() ? run_streamed(prompt_ids, request, o, each) : run_rounds(prompt_ids, request, o, each);
  r.prompt_ids = prompt_ids;
  if (tokenizer && !on_text && !stops)
    for (int32_t id : r.ids) push(id);
  if (stopped_at >= 0) {
    r.ids.resize(static_cast<size_t>(stopped_at));
    r.finish_reason = "stop";
    r.text = matcher.released();
  } else if (streamer) {
    std::string tail = matcher.flush() + streamer->finish();
    if (on_text && !tail.empty()) on_text(tail);
    r.text = streamer->text();
  }
  Stats& s = r.stats;
  s.new_tokens = static_cast<int64_t>(r.ids.size());
  if (!drafter.has(kDraftsNothing)) s.emulated_draft_factor = options.emulate_draft_factor;
  if (link && options.verifier == VerifierKind::kServer) {
    const ForwardEmulation e = ForwardEmulation::parse(link->info().emulated_forward_ms());
    s.emulated_forward_fixed_ms = e.fixed_ms;
    s.emulated_forward_per_row_ms = e.per_row_ms;
  }
  s.derive();
  return r;
}

Result Client::Impl::run_streamed(const std::vector<int32_t>& prompt, const Request& req, const GenerateOptions& o,
                                  const std::function<bool(int32_t)>& on_token) {
  const StreamedGeneration g = stream_generate(*link, prompt, o, vocab, fingerprint(),
                                               StreamControl{req.deadline, options.reconnect_budget, &cancel}, on_token);
  Result r;
  r.ids = g.ids;
  r.finish_reason = finish_reason_name(g.finish);
  r.stats.first_token_ms = g.first_token_ms;
  r.stats.resumes = g.resumes;
  r.stats.switch_ms = g.switch_ms;
  r.stats.prefill_ms = g.first_token_ms;
  r.stats.target_forwards = g.forwards;
  r.stats.server_forward_ms = g.forward_ms;
  r.stats.target_forward_ms = g.forward_ms;
  r.stats.wall_ms = g.wall_ms;
  r.stats.decode_ms = g.wall_ms - g.first_token_ms;
  r.stats.decode_tokens = g.ids.empty() ? 0 : static_cast<int64_t>(g.ids.size()) - 1;
  r.stats.token_ms = g.token_ms;
  return r;
}

Result Client::Impl::run_rounds(const std::vector<int32_t>& prompt, const Request& req, const GenerateOptions& o,
                                const std::function<bool(int32_t)>& on_token) {
  const bool server = options.verifier == VerifierKind::kServer;
  if (drafter.has(kChainOfGamma)) {
    if (req.gamma < 1) throw Error("gamma must be at least 1");
    if (server && req.gamma > link->info().max_draft_tokens())
      throw Error("gamma " + std::to_string(req.gamma) + " exceeds the server's max_draft_tokens of " +
                  std::to_string(link->info().max_draft_tokens()));
  }
  const std::unique_ptr<Drafter> d = drafter.make(spec);
  RoundLoopOptions lo;
  lo.generate = o;
  lo.speculative = req;
  lo.deadline = std::chrono::steady_clock::now() + req.deadline;
  lo.predraft = options.predraft;
  lo.predraft_threads = options.predraft_threads;
  lo.draft_slowdown = options.emulate_draft_factor;
  if (options.predraft) lo.predraft_queue = parse_queue_policy(options.predraft_queue);
  if (options.predraft_adaptive) lo.predraft_switch = &predraft_switch;
  lo.cancel = &cancel;
  const RoundLoopResult g = run_round_loop(*d, *verifier, prompt, lo, on_token);

  Result r;
  r.ids = g.ids;
  r.finish_reason = finish_reason_name(g.finish);
  // The loop's parts, the verifier's and the faults' are the public Stats'
  // as they are, and so are the drafter's counts (DrafterCounts).
  r.stats = g.stats;
  Stats& s = r.stats;
  const VerifierStats vs = verifier->stats();
  static_cast<TargetStats&>(s) = vs;
  static_cast<LinkStats&>(s) = vs;
  if (resilient) static_cast<FaultStats&>(s) = resilient->fault_stats();
  if (!numerics_differ.empty() && s.fallback_rounds > 0) s.mixed_numerics = 1;
  static_cast<DrafterCounts&>(s) = d->stats();
  s.drafter_memory_bytes = d->memory_bytes();
  return r;
}

}  // namespace splitspec

#pragma once
// SplitSpec client API: what a robot controller links against.
//
//   splitspec::ClientOptions opts;
//   opts.verifier = splitspec::VerifierKind::kServer;  // the target runs on a server
//   opts.drafter = "model";                             // a draft model here proposes
//   opts.server = "10.0.0.5:50051";
//   opts.draft_dir = "models/demo-draft";
//   auto client = splitspec::Client::connect(opts);   // checks vocab + tokenizer
//   splitspec::Request req;
//   req.max_new_tokens = 64;
//   auto result = client->generate("Turn left at the", req,
//                                  [](const std::string& piece) { std::cout << piece; });
//
// A generation is rounds of one loop: a drafter proposes tokens (a chain or a
// token tree), a verifier checks them against the target in one forward. Two
// choices make a mode:
//   verifier  local   the target on this device, in memory or streamed from
//                     disk under `memory_budget`
//             server  the target on splitspec-server
//   drafter   none        no drafting: plain decoding (with the server
//                         verifier, the server's own streaming loop: cloud-ar)
//             model       a draft model proposes `gamma` tokens a round
//             model-tree  a draft model grows EdgeLLM's width-adaptive token
//                         tree, verified when its confidence falls below an
//                         adaptive threshold; with a streamed target it drafts
//                         on while the target's weights load
//   predraft  (server)    the server streams what its early exits predict the
//                         verdict will be; worker threads here draft the next
//                         round from those predictions, and when the final
//                         verdict matches one, that draft goes out at once
// Earlier releases named the modes; those names stay as aliases (`mode`):
//   local-ar = local+none, local-sd = local+model, local-tree =
//   local+model-tree, cloud-ar = server+none, edge-sd = server+model,
//   edge-fsd = server+model with predraft.
// Every mode produces exactly what the target alone would: the same tokens
// under greedy decoding (temperature 0), the same distribution when sampling.
//
// A robot's network drops. With the server verifier a generation whose
// Session stream breaks (server restarted, network blip, replica drained)
// reconnects within `reconnect_budget` and continues from exactly the
// committed tokens; with `fallback_target_dir` it goes on with the local
// verifier at the next round boundary once the server is unreachable or a
// round outlasts `Request::round_timeout`, and returns to the server when its
// health says SERVING. With a fallback, connect() to a server that cannot be
// reached succeeds: generations start locally and move to the server once it
// answers with the fallback's model. A generation whose server rounds, at
// their measured pace, would miss `Request::deadline` finishes on the
// fallback. Every random draw is keyed by the seed and the
// position, so either way the tokens are those of an uninterrupted run, and
// the callback never sees a token twice.
//
// Errors (unreachable or dead server, tokenizer mismatch, bad request, a
// combination that cannot work, deadline) throw splitspec::Error with a
// message meant for humans. A Client runs one generation at a time; use one
// Client per thread. cancel() may be called from any thread.
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace splitspec {

// What every call throws, with a message meant for humans. Defined here, token
// for token as in common/util/error.h, so that the installed header stands alone.
#ifndef SPLITSPEC_ERROR_DEFINED
#define SPLITSPEC_ERROR_DEFINED
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};
#endif

enum class VerifierKind { kLocal, kServer };
// "local", "server"; parse_verifier throws splitspec::Error.
VerifierKind parse_verifier(const std::string& name);
std::string verifier_name(VerifierKind kind);

enum class Mode { kCloudAr, kEdgeSd, kEdgeFsd, kLocalAr, kLocalSd, kLocalTree };
// "cloud-ar", "edge-sd", "edge-fsd", "local-ar", "local-sd", "local-tree";
// parse_mode throws splitspec::Error.
Mode parse_mode(const std::string& name);
std::string mode_name(Mode mode);

struct ClientOptions {
  VerifierKind verifier = VerifierKind::kServer;
  std::string drafter = "model";  // none, model, model-tree, or a registered one
  bool predraft = false;          // server verifier: pre-draft on early verdicts
  // An alias of earlier releases; when set, it decides the three above.
  std::optional<Mode> mode;
  // The server verifier's HOST:PORT; or replicas: IPv4 HOST:PORT,HOST:PORT
  // or dns:///NAME:PORT. Sessions spread over them round robin, each stays
  // on its replica, and draining ones get no new session.
  std::string server;
  std::string draft_dir;   // drafters with a draft model: the draft model
  std::string target_dir;  // local verifier: the target model
  // Local verifier: where the target computes, "cpu" (empty) or "cuda[:N]"
  // (in programs built with the CUDA backend: the splitspec CLI, not this
  // library alone).
  std::string device;
  // Request::messages: a built-in chat template (llama3, chatml, phi3,
  // llama2, gemma) instead of the one the model's files name.
  std::string chat_template;
  // Local verifier: most memory the target's weights may take ("8MiB", "25%"
  // of its weights as stored in its files, bytes); empty loads it whole.
  // `stream_pipeline` reads ahead on a loader thread (StdPL) rather than at
  // each matrix (Std), as far as `stream_read_ahead` file bytes ("1MiB",
  // "5%"; part of the budget; empty: two layers as stored, or what the
  // budget has left).
  std::string memory_budget;
  // The local target's KV cache: "f32", or "f16" for half its memory (and
  // outputs exact for that cache, not the f32 one's). Empty: f32, and a
  // fallback target takes the server's (ServerInfo.kv_cache).
  std::string kv_cache;
  // The local target's and the draft model's weights converted to this type
  // at load ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q5_k_m",
  // "q6_k"); empty: as stored. A fallback target stays as stored, since it
  // must be the server's weights; a streamed target cannot be converted.
  std::string dtype;
  bool stream_pipeline = true;
  std::string stream_read_ahead;
  // Settings of drafters that take their own ("key" -> "value"): lut's
  // tables, or model-tree's fallback, provisional (1/0), nodes, max_nodes,
  // alpha, max_provisional, max_children and draft_width (docs/local-mode.md).
  std::map<std::string, std::string> drafter_options;
  // Tokenizer (model directory or tokenizer.model) for text prompts; default:
  // the target's with the local verifier, else the draft's.
  std::string tokenizer;
  int threads = 0;  // compute threads on this device; 0: OMP_NUM_THREADS if set, else the physical cores
  // Pre-drafting: worker threads (one compute thread each) and the order
  // they take early verdicts in: "priority" (most confident first), "fifo"
  // or "random".
  int predraft_threads = 1;
  std::string predraft_queue = "priority";
  // false: pre-draft every round (the early-exit edge-cloud paper's
  // Algorithm 1). true: only while it measurably lowers latency
  // (predraft_switch.h), else rounds run without it, with an occasional
  // probe; for hardware shared with the server, or exits that rarely agree
  // with the final layer.
  bool predraft_adaptive = false;
  // Emulates a slower edge device (a Jetson on a workstation): every
  // drafting step (a draft model's forward, a table look-up, a head's beam
  // search) takes this many times its measured time. 1: real. Tokens are
  // unchanged; times are reported as emulated (Stats::emulated_draft_factor).
  double emulate_draft_factor = 1;
  std::chrono::milliseconds connect_timeout{5000};
  // Server verifier: how long a broken generation may try to reconnect, from
  // the break, before it fails over (or fails); 0: never.
  std::chrono::milliseconds reconnect_budget{10000};
  // Server verifier: a local target to go on with when the server is
  // unreachable or too slow for a request's deadline, streamed under
  // `memory_budget` when one is given: it must be the server's target. A
  // break then goes local at once when the server refuses connections, and
  // waits at most `failback_interval` for a silent one. While a generation
  // runs here, the server's health is asked every `failback_interval`; when
  // it says SERVING, later rounds return to it. With a fallback, connect()
  // succeeds though the server cannot be reached (an offline start).
  std::string fallback_target_dir;
  std::chrono::milliseconds failback_interval{500};
  // A fallback target whose arithmetic differs from the server's (a GPU
  // server, this CPU's fallback: ServerInfo::backend) still takes over, with
  // a warning at connect, and marks the generations it verifies
  // (Stats::mixed_numerics): greedy tokens after a failover may then differ
  // from the server's alone. `strict_numerics` refuses such a pairing.
  bool strict_numerics = false;
  // Server verifier security. `tls_ca` (a PEM file): speak TLS and trust
  // servers it signed; `tls_cert` and `tls_key`: this client's certificate,
  // for servers that require mutual TLS; `tls_server_name`: the name the
  // server's certificate must carry when it is not the address's host.
  // `auth_token`, or the first line of `auth_token_file`: a bearer token sent
  // with every call. Only over TLS, unless `allow_insecure_tokens` says the
  // network is trusted: on plaintext anyone on the path reads the token.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_server_name;
  std::string auth_token;
  std::string auth_token_file;
  bool allow_insecure_tokens = false;
};

// `options` with the verifier, drafter and predraft that `mode` stands for.
ClientOptions with_mode(ClientOptions options, Mode mode);
// The same for an alias or for choices as mode_name() writes them
// ("server+model-tree", "server+model+predraft"); throws splitspec::Error.
ClientOptions with_mode(ClientOptions options, const std::string& name);
// The alias an option set is known by ("edge-fsd"), else its choices
// ("server+model-tree", "server+model-tree+predraft").
std::string mode_name(const ClientOptions& options);

// One turn of a conversation (Request::messages).
struct Message {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct Request {
  // A conversation instead of a prompt: generate() is then given an empty
  // prompt, and the model's chat template (or ClientOptions::chat_template)
  // writes the prompt, ending with the assistant's turn.
  std::vector<Message> messages;
  // Generation stops once its text holds one of these; the text ends before
  // it, the ids with the token that completed it, finish_reason "stop".
  std::vector<std::string> stop;
  int32_t max_new_tokens = 128;
  float temperature = 0.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
  bool ignore_eos = false;
  int32_t gamma = 4;  // the model drafter: draft tokens per round
  // The whole generation; beyond it generate() throws instead of waiting.
  std::chrono::milliseconds deadline{120000};
  // Server verifier: one round's verdict; a round that outlasts it counts as
  // a broken stream (reconnect, then fall back). 0: only the deadline.
  std::chrono::milliseconds round_timeout{0};
};

// What a generation measured, in parts: the clock, the drafting, the
// target's forwards, the link to the server, pre-drafting and faults. Each
// part lists its fields once (fields()), which is what sums it, what the
// CLI prints as JSON and what Python shows. Stats derives from the parts, so
// each field is reached as before (stats.tau, stats.resumes).
//
// Sums: `total += r.stats` adds a generation to a total the way each field
// adds up (Merge), then recomputes the means, rates and percentiles from
// the sums, so a total's tau is its tokens over its rounds, not a mean of
// means.
enum class Merge {
  kSum,      // counts and totals
  kMax,      // peaks and sizes
  kLast,     // a level at the end: the later generation's
  kAppend,   // samples
  kDerived,  // a mean, rate or percentile of the others (Stats::derive)
};

// The clock.
struct TimingStats {
  int64_t new_tokens = 0;
  double wall_ms = 0;          // the whole call
  double ms_per_token = 0;
  double first_token_ms = 0;   // until the first generated token arrived
  // The prompt's target forward (with the first round's draft; server modes:
  // as the server reports it; cloud-ar: the time to the first token).
  double prefill_ms = 0;
  double decode_ms = 0;              // after the first round: wall_ms - first_token_ms
  int64_t decode_tokens = 0;         // tokens after the first round's
  double decode_tokens_per_s = 0;    // decode_tokens per second of decode_ms
  // Per-token latency after the first round: each token charged its round's
  // time (verdict to verdict) over the round's tokens; cloud-ar: the gap
  // between the server's messages. The worst token, not only the mean.
  double token_ms_p50 = 0, token_ms_p90 = 0, token_ms_p99 = 0, token_ms_max = 0;
  std::vector<double> token_ms;  // the samples themselves, in order

  template <class V>
  static void fields(V&& v) {
    using T = TimingStats;
    v("new_tokens", &T::new_tokens, Merge::kSum);
    v("wall_ms", &T::wall_ms, Merge::kSum);
    v("ms_per_token", &T::ms_per_token, Merge::kDerived);
    v("first_token_ms", &T::first_token_ms, Merge::kSum);
    v("prefill_ms", &T::prefill_ms, Merge::kSum);
    v("decode_ms", &T::decode_ms, Merge::kSum);
    v("decode_tokens", &T::decode_tokens, Merge::kSum);
    v("decode_tokens_per_s", &T::decode_tokens_per_s, Merge::kDerived);
    v("token_ms_p50", &T::token_ms_p50, Merge::kDerived);
    v("token_ms_p90", &T::token_ms_p90, Merge::kDerived);
    v("token_ms_p99", &T::token_ms_p99, Merge::kDerived);
    v("token_ms_max", &T::token_ms_max, Merge::kDerived);
    v("token_ms", &T::token_ms, Merge::kAppend);
  }
};

// Rounds of drafting and verification, and the drafter on this device.
struct DraftStats {
  int64_t rounds = 0;
  double tau = 0;                     // tokens per round
  int64_t drafted_tokens = 0;         // draft tokens (tree nodes) sent to the target
  int64_t accepted_tokens = 0;        // of those, accepted
  double acceptance_rate = 0;         // accepted / drafted tokens
  // Per depth of the tree (a chain's position): rounds whose draft reached
  // it, rounds that accepted a token there, and their ratio.
  std::vector<int64_t> proposed_per_position;
  std::vector<int64_t> accepted_per_position;
  std::vector<double> acceptance_per_position;
  double accepted_per_round = 0;      // draft tokens accepted per verification
  double tree_nodes = 0;              // mean draft nodes per round
  int64_t branched_trees = 0;         // rounds whose draft was not a chain
  double draft_ms = 0;                // drafting on this device
  int64_t draft_forwards = 0;
  uint64_t drafter_memory_bytes = 0;  // what the drafter holds (KV cache, trees), at the end
  // Technique-specific. Summed, except levels ("alpha" and sizes ending
  // "_bytes"), which are the later generation's.
  std::map<std::string, double> drafter_counters;
  // model-tree.
  double final_alpha = 0;             // the fallback threshold at the end
  int64_t provisional_tokens = 0;     // drafted while weights loaded
  int64_t provisional_kept = 0;       //   of those, kept for the next tree
  double emulated_draft_factor = 1;   // ClientOptions::emulate_draft_factor: above 1, draft times are emulated

  template <class V>
  static void fields(V&& v) {
    using T = DraftStats;
    v("rounds", &T::rounds, Merge::kSum);
    v("tau", &T::tau, Merge::kDerived);
    v("drafted_tokens", &T::drafted_tokens, Merge::kSum);
    v("accepted_tokens", &T::accepted_tokens, Merge::kSum);
    v("acceptance_rate", &T::acceptance_rate, Merge::kDerived);
    v("proposed_per_position", &T::proposed_per_position, Merge::kSum);
    v("accepted_per_position", &T::accepted_per_position, Merge::kSum);
    v("acceptance_per_position", &T::acceptance_per_position, Merge::kDerived);
    v("accepted_per_round", &T::accepted_per_round, Merge::kDerived);
    v("tree_nodes", &T::tree_nodes, Merge::kDerived);
    v("branched_trees", &T::branched_trees, Merge::kSum);
    v("draft_ms", &T::draft_ms, Merge::kSum);
    v("draft_forwards", &T::draft_forwards, Merge::kSum);
    v("drafter_memory_bytes", &T::drafter_memory_bytes, Merge::kMax);
    v("drafter_counters", &T::drafter_counters, Merge::kSum);
    v("final_alpha", &T::final_alpha, Merge::kLast);
    v("provisional_tokens", &T::provisional_tokens, Merge::kSum);
    v("provisional_kept", &T::provisional_kept, Merge::kSum);
    v("emulated_draft_factor", &T::emulated_draft_factor, Merge::kMax);
  }
};

// The target's forwards, here or on the server.
struct TargetStats {
  double target_forward_ms = 0;       // every target forward, here or on the server
  int64_t target_forwards = 0;
  double target_ms = 0;               // the local verifier's forwards
  uint64_t weight_bytes_read = 0;     // streamed target: read from disk
  uint64_t weight_memory_peak = 0;    // streamed target: most weight memory held
  double weight_stall_ms = 0;         // streamed target: forwards waiting for weights

  template <class V>
  static void fields(V&& v) {
    using T = TargetStats;
    v("target_forward_ms", &T::target_forward_ms, Merge::kSum);
    v("target_forwards", &T::target_forwards, Merge::kSum);
    v("target_ms", &T::target_ms, Merge::kSum);
    v("weight_bytes_read", &T::weight_bytes_read, Merge::kSum);
    v("weight_memory_peak", &T::weight_memory_peak, Merge::kMax);
    v("weight_stall_ms", &T::weight_stall_ms, Merge::kSum);
  }
};

// The server verifier's link.
struct LinkStats {
  double verify_wait_ms = 0;          // from sending drafts to their verdict, summed
  double server_ms = 0;               // of that, time the server reports (queue, forward, verify)
  double server_forward_ms = 0;       // of that, target forwards
  double server_exits_ms = 0;         // of that, early exits (edge-fsd)
  double network_rtt_ms = 0;          // mean per round: verify wait minus server time
  int64_t verdict_bytes = 0;          // final verdicts received, serialized
  int64_t verdict_top_k_bytes = 0;    //   of those, the target's top K (the lut drafter asks for them)
  int64_t verdict_hidden_bytes = 0;   //   of those, the target's hidden state (the recurrent drafter's)
  int64_t draft_bytes = 0;            // drafts sent upstream, serialized
  // The server's --emulate-forward-ms (ServerInfo): nonzero, its forward
  // times, and every time measured through it, are emulated.
  double emulated_forward_fixed_ms = 0;
  double emulated_forward_per_row_ms = 0;

  template <class V>
  static void fields(V&& v) {
    using T = LinkStats;
    v("verify_wait_ms", &T::verify_wait_ms, Merge::kSum);
    v("server_ms", &T::server_ms, Merge::kSum);
    v("server_forward_ms", &T::server_forward_ms, Merge::kSum);
    v("server_exits_ms", &T::server_exits_ms, Merge::kSum);
    v("network_rtt_ms", &T::network_rtt_ms, Merge::kDerived);
    v("verdict_bytes", &T::verdict_bytes, Merge::kSum);
    v("verdict_top_k_bytes", &T::verdict_top_k_bytes, Merge::kSum);
    v("verdict_hidden_bytes", &T::verdict_hidden_bytes, Merge::kSum);
    v("draft_bytes", &T::draft_bytes, Merge::kSum);
    v("emulated_forward_fixed_ms", &T::emulated_forward_fixed_ms, Merge::kMax);
    v("emulated_forward_per_row_ms", &T::emulated_forward_per_row_ms, Merge::kMax);
  }
};

// Pre-drafting (edge-fsd).
struct PredraftStats {
  int64_t early_verdicts = 0;         // received for rounds still open
  int64_t predrafts = 0;              // pre-drafts started
  int64_t predraft_rounds = 0;        // rounds that asked for early verdicts
  int64_t predraft_lookups = 0;       // final verdicts looked up in the pre-draft cache
  int64_t predraft_hits = 0;          // of those, found (r = 1 - hits / lookups)
  int64_t predraft_waited_hits = 0;   // of those, still being drafted (waited T_r)
  double cache_miss_rate = 0;         // r: final verdicts with no pre-draft
  int64_t exit_layer_sum = 0;         // over hits: the exit whose verdict produced each
  double avg_exit_layer = 0;          // "Avg EE": exit_layer_sum / hits
  double predraft_ms = 0;             // worker drafting time
  double sync_wait_ms = 0;            // T_r: waiting for a hit's pre-draft to finish
  // From a final verdict to the next draft sent, on hits and on misses
  // (drafting included): how many, their sum and their mean.
  int64_t hit_sends = 0, miss_sends = 0;
  double hit_send_total_ms = 0, miss_send_total_ms = 0;
  double hit_send_ms = 0, miss_send_ms = 0;

  template <class V>
  static void fields(V&& v) {
    using T = PredraftStats;
    v("early_verdicts", &T::early_verdicts, Merge::kSum);
    v("predrafts", &T::predrafts, Merge::kSum);
    v("predraft_rounds", &T::predraft_rounds, Merge::kSum);
    v("predraft_lookups", &T::predraft_lookups, Merge::kSum);
    v("predraft_hits", &T::predraft_hits, Merge::kSum);
    v("predraft_waited_hits", &T::predraft_waited_hits, Merge::kSum);
    v("cache_miss_rate", &T::cache_miss_rate, Merge::kDerived);
    v("exit_layer_sum", &T::exit_layer_sum, Merge::kSum);
    v("avg_exit_layer", &T::avg_exit_layer, Merge::kDerived);
    v("predraft_ms", &T::predraft_ms, Merge::kSum);
    v("sync_wait_ms", &T::sync_wait_ms, Merge::kSum);
    v("hit_sends", &T::hit_sends, Merge::kSum);
    v("miss_sends", &T::miss_sends, Merge::kSum);
    v("hit_send_total_ms", &T::hit_send_total_ms, Merge::kSum);
    v("miss_send_total_ms", &T::miss_send_total_ms, Merge::kSum);
    v("hit_send_ms", &T::hit_send_ms, Merge::kDerived);
    v("miss_send_ms", &T::miss_send_ms, Merge::kDerived);
  }
};

// Faults (server verifier): a round whose stream broke is verified again,
// on a new session or by the fallback target.
struct FaultStats {
  int64_t resumes = 0;                // breaks after which the server verified again (a new session)
  int64_t failovers = 0;              // switches to the fallback target
  int64_t failbacks = 0;              // switches back to the server
  int64_t server_rounds = 0;          // rounds whose verdict came from the server
  int64_t fallback_rounds = 0;        // from the fallback target
  int64_t retried_rounds = 0;         // rounds sent again after a break: lost work
  double switch_ms = 0;               // from each break to the verdict that followed it, summed
  // Generations that started on the fallback, the server not reached since
  // connect (an offline start).
  int64_t offline_starts = 0;
  // Of the failovers, moves made because the server's measured round times
  // said the rest would miss the request's deadline.
  int64_t deadline_failovers = 0;
  // 1 when the fallback target verified rounds of the generation and
  // computes with other numerics than the server (its backend, arithmetic
  // or kernels): the tokens mix two definitions of the target.
  int64_t mixed_numerics = 0;

  template <class V>
  static void fields(V&& v) {
    using T = FaultStats;
    v("resumes", &T::resumes, Merge::kSum);
    v("failovers", &T::failovers, Merge::kSum);
    v("failbacks", &T::failbacks, Merge::kSum);
    v("server_rounds", &T::server_rounds, Merge::kSum);
    v("fallback_rounds", &T::fallback_rounds, Merge::kSum);
    v("retried_rounds", &T::retried_rounds, Merge::kSum);
    v("switch_ms", &T::switch_ms, Merge::kSum);
    v("offline_starts", &T::offline_starts, Merge::kSum);
    v("deadline_failovers", &T::deadline_failovers, Merge::kSum);
    v("mixed_numerics", &T::mixed_numerics, Merge::kSum);
  }
};

struct Stats : TimingStats, DraftStats, TargetStats, LinkStats, PredraftStats, FaultStats {
  // Each part in turn: f(name, part), e.g. f("timing", static_cast<TimingStats&>(s)).
  template <class S, class F>
  static void parts(S& s, F&& f) {
    f("timing", static_cast<std::conditional_t<std::is_const_v<S>, const TimingStats, TimingStats>&>(s));
    f("drafting", static_cast<std::conditional_t<std::is_const_v<S>, const DraftStats, DraftStats>&>(s));
    f("target", static_cast<std::conditional_t<std::is_const_v<S>, const TargetStats, TargetStats>&>(s));
    f("link", static_cast<std::conditional_t<std::is_const_v<S>, const LinkStats, LinkStats>&>(s));
    f("predraft", static_cast<std::conditional_t<std::is_const_v<S>, const PredraftStats, PredraftStats>&>(s));
    f("faults", static_cast<std::conditional_t<std::is_const_v<S>, const FaultStats, FaultStats>&>(s));
  }
  // Adds a generation (Merge), then derive().
  Stats& operator+=(const Stats& other);
  // Recomputes every Merge::kDerived field from the sums.
  void derive();
};

struct Result {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> ids;   // generated ids
  std::string text;           // generated text (empty without a tokenizer)
  std::string finish_reason;  // "length", "eos", "context" or "cancelled"
  Stats stats;
};

struct ServerInfo {
  std::string model_name;
  int32_t vocab_size = 0;
  std::string tokenizer_fingerprint;
  int32_t max_context = 0;
  int32_t max_draft_tokens = 0;
  int32_t active_sessions = 0;
  std::string version;
  std::string kv_cache;  // the target's KV cache type: "f32" or "f16"
  std::string weight_type;     // the target's layer matrices' type, e.g. "q4_k"
  std::string weights_digest;  // of its weights (empty: streamed from disk)
  // What computes it: "cpu" or "cuda", and the device in words.
  std::string backend;
  std::string device;
  // "FIXED:PER_ROW" ms when the server emulates a slower accelerator
  // (--emulate-forward-ms): its times are emulated. Empty: real.
  std::string emulated_forward_ms;
};

namespace detail {
template <class T>
inline constexpr bool is_std_function_v = false;
template <class R, class... A>
inline constexpr bool is_std_function_v<std::function<R(A...)>> = true;
}  // namespace detail

// A streaming callback: returns void, or bool where false stops the
// generation (its result then ends "cancelled").
template <class Arg>
class StreamCallback {
 public:
  StreamCallback() = default;
  template <class F, std::enable_if_t<std::is_invocable_v<F&, Arg> &&
                                          !std::is_same_v<std::decay_t<F>, StreamCallback>, int> = 0>
  StreamCallback(F f) {  // NOLINT: implicit, so that lambdas pass as they are
    if constexpr (detail::is_std_function_v<std::decay_t<F>> || std::is_pointer_v<std::decay_t<F>>)
      if (!f) return;  // empty: no callback
    if constexpr (std::is_same_v<std::invoke_result_t<F&, Arg>, bool>)
      fn_ = std::move(f);
    else
      fn_ = [f = std::move(f)](Arg a) mutable {
        f(a);
        return true;
      };
  }
  explicit operator bool() const { return static_cast<bool>(fn_); }
  bool operator()(Arg a) const { return fn_(a); }

 private:
  std::function<bool(Arg)> fn_;
};
using OnText = StreamCallback<const std::string&>;
using OnToken = StreamCallback<int32_t>;

class Client;

// A generation running on its own thread (Client::generate_async).
class Generation {
 public:
  Generation(Generation&&) noexcept = default;
  // Ends the one held first, as the destructor does.
  Generation& operator=(Generation&& other) noexcept;
  // Cancels it if still running, and waits.
  ~Generation();
  bool done() const;
  // Whether it finished within `timeout`.
  bool wait_for(std::chrono::milliseconds timeout) const;
  // Waits; the result, or the generation's error rethrown. Once.
  Result get();
  // Stops it at the next round boundary; get() then returns what it made.
  void cancel();

 private:
  friend class Client;
  Generation(Client* client, std::future<Result> result) : client_(client), result_(std::move(result)) {}
  void finish() noexcept;
  Client* client_ = nullptr;
  std::future<Result> result_;
};

class Client {
 public:
  // Loads the local model(s) and, with the server verifier, connects and
  // checks that the server's vocabulary and tokenizer match ours.
  static std::unique_ptr<Client> connect(const ClientOptions& options);
  ~Client();

  // Text prompt: tokenized with BOS prepended; on_text receives the text as it
  // becomes final.
  Result generate(const std::string& prompt, const Request& request, const OnText& on_text = {});
  // Token ids, used verbatim; on_token receives each id once final.
  Result generate_ids(const std::vector<int32_t>& prompt_ids, const Request& request, const OnToken& on_token = {});
  // generate() on a thread of its own; callbacks run there. The Client must
  // outlive the handle and run nothing else meanwhile.
  Generation generate_async(const std::string& prompt, const Request& request, OnText on_text = {});
  Generation generate_ids_async(const std::vector<int32_t>& prompt_ids, const Request& request, OnToken on_token = {});
  // Stops the generation running now, from any thread, at the next round
  // boundary (a round on the server is cancelled at once, freeing its
  // session); it returns what it made, finish_reason "cancelled".
  void cancel();

  // Server verifier only (throws otherwise).
  ServerInfo server_info();
  // One GetInfo round trip, in ms: the network's RTT plus gRPC's overhead.
  double ping_ms();

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace splitspec

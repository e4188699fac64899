#pragma once
// SplitSpec client API: what a robot controller links against.
//
//   splitspec::ClientOptions opts;
//   opts.mode = splitspec::Mode::kEdgeSd;      // draft here, verify on the server
//   opts.server = "10.0.0.5:50051";
//   opts.draft_dir = "models/demo-draft";
//   auto client = splitspec::Client::connect(opts);   // checks vocab + tokenizer
//   splitspec::Request req;
//   req.max_new_tokens = 64;
//   auto result = client->generate("Turn left at the", req,
//                                  [](const std::string& piece) { std::cout << piece; });
//
// Modes:
//   cloud-ar  the server's target generates every token (the baseline)
//   edge-sd   a draft model on this device proposes `gamma` tokens per round,
//             the server's target verifies them in one forward
//   edge-fsd  edge-sd plus pre-drafting: the server streams what its early
//             exits predict the verdict will be; worker threads here draft
//             the next round from those predictions, and when the final
//             verdict matches one, that draft goes out at once
//   local-ar  the target runs on this device, no server (EdgeLLM's Std, or
//             StdPL with the read-ahead pipeline, when streamed)
//   local-sd  local-ar plus a local draft proposing `gamma` tokens a round
//   local-tree  EdgeLLM: the draft grows a width-adaptive token tree, the
//             target verifies it in one forward when the tree's confidence
//             falls below an adaptive threshold, and the draft goes on
//             provisionally while the target's weights load
// The local modes take `memory_budget`: the target's weights then stay on
// disk and stream in per forward, with at most that much of them in memory.
// Every mode produces exactly what the target alone would: the same tokens
// under greedy decoding (temperature 0), the same distribution when sampling.
//
// Errors (unreachable or dead server, tokenizer mismatch, bad request,
// deadline) throw splitspec::Error with a message meant for humans. A Client
// runs one generate() at a time; use one Client per thread.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace splitspec {

enum class Mode { kCloudAr, kEdgeSd, kEdgeFsd, kLocalAr, kLocalSd, kLocalTree };
// "cloud-ar", "edge-sd", "edge-fsd", "local-ar", "local-sd", "local-tree";
// parse_mode throws splitspec::Error.
Mode parse_mode(const std::string& name);
std::string mode_name(Mode mode);

struct ClientOptions {
  Mode mode = Mode::kEdgeSd;
  std::string server;      // HOST:PORT, for cloud-ar and edge-sd
  std::string draft_dir;   // edge-sd, edge-fsd, local-sd, local-tree: the draft model
  std::string target_dir;  // local modes: the target model
  // Local modes: most memory the target's weights may take ("8MiB", "25%"
  // of its fp32 size, bytes); empty loads it whole. `stream_pipeline` reads
  // ahead on a loader thread (StdPL) rather than at each matrix (Std), as
  // far as `stream_read_ahead` file bytes ("1MiB", "5%"; part of the budget;
  // empty: two layers as stored, or what the budget has left).
  std::string memory_budget;
  bool stream_pipeline = true;
  std::string stream_read_ahead;
  // local-tree, each switch for ablation: the self-adaptive fallback (off:
  // trees of `tree_nodes`), provisional drafting while weights load.
  bool tree_fallback = true;
  bool tree_provisional = true;
  int tree_nodes = 32;
  int max_tree_nodes = 32;
  double tree_alpha = 0.01;
  int max_provisional = 16;
  int tree_max_children = 2;  // greedy alternatives a node offers
  int tree_draft_width = 8;    // tree nodes drafted together in one draft forward
  // Tokenizer (model directory or tokenizer.model) for text prompts; default:
  // the draft's (edge-sd, cloud-ar) or the target's (local-ar).
  std::string tokenizer;
  int threads = 1;  // compute threads on this device
  // edge-fsd: pre-draft worker threads (one compute thread each) and the
  // order they take early verdicts in: "priority" (most confident first),
  // "fifo" or "random".
  int predraft_threads = 1;
  std::string predraft_queue = "priority";
  // false: pre-draft every round (the paper's Algorithm 1). true: only while
  // it measurably lowers latency (predraft_switch.h), else rounds run as
  // edge-sd with an occasional probe; for hardware shared with the server,
  // or exits that rarely agree with the final layer.
  bool predraft_adaptive = false;
  std::chrono::milliseconds connect_timeout{5000};
};

struct Request {
  int32_t max_new_tokens = 128;
  float temperature = 0.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
  bool ignore_eos = false;
  int32_t gamma = 4;  // edge-sd, edge-fsd, local-sd: draft tokens per round
  // The whole generation; beyond it generate() throws instead of waiting.
  std::chrono::milliseconds deadline{120000};
};

struct Stats {
  int64_t new_tokens = 0;
  double wall_ms = 0;          // the whole call
  double ms_per_token = 0;
  double first_token_ms = 0;   // until the first generated token arrived
  int64_t target_forwards = 0; // on the server (or locally for local-ar)
  // Speculative modes.
  int64_t rounds = 0;
  double tau = 0;                     // tokens per round
  double acceptance_rate = 0;         // accepted / drafted tokens
  std::vector<double> acceptance_per_position;
  double draft_ms = 0;                // drafting on this device
  int64_t draft_forwards = 0;
  double verify_wait_ms = 0;          // from sending drafts to their verdict, summed
  double server_ms = 0;               // of that, time the server reports (queue, forward, verify)
  double server_forward_ms = 0;       // of that, target forwards
  double server_exits_ms = 0;         // of that, early exits (edge-fsd)
  double network_rtt_ms = 0;          // mean per round: verify wait minus server time
  // edge-fsd.
  int64_t early_verdicts = 0;         // received for rounds still open
  int64_t predrafts = 0;              // pre-drafts started
  double cache_miss_rate = 0;         // r: final verdicts with no pre-draft
  double avg_exit_layer = 0;          // "Avg EE": the exit whose verdict produced each hit
  double predraft_ms = 0;             // worker drafting time
  double sync_wait_ms = 0;            // T_r: waiting for a hit's pre-draft to finish
  double hit_send_ms = 0;             // mean, final verdict to next draft sent, on hits
  double miss_send_ms = 0;            // the same on misses (drafting included)
  int64_t predraft_rounds = 0;        // rounds that asked for early verdicts
  int64_t predraft_lookups = 0;       // final verdicts looked up in the pre-draft cache
  int64_t predraft_hits = 0;          // of those, found (r = 1 - hits / lookups)
  // Local modes.
  double target_ms = 0;               // target forwards (verifications)
  double accepted_per_round = 0;      // draft tokens accepted per verification
  double tree_nodes = 0;              // local-tree: mean nodes per verified tree
  double final_alpha = 0;             // local-tree: the fallback threshold at the end
  int64_t provisional_tokens = 0;     // local-tree: drafted while weights loaded
  int64_t provisional_kept = 0;       //   of those, kept for the next tree
  uint64_t weight_bytes_read = 0;     // streamed target: read from disk
  uint64_t weight_memory_peak = 0;    // streamed target: most weight memory held
  double weight_stall_ms = 0;         // streamed target: forwards waiting for weights
};

struct Result {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> ids;   // generated ids
  std::string text;           // generated text (empty without a tokenizer)
  std::string finish_reason;  // "length", "eos" or "context"
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
};

class Client {
 public:
  // Loads the local model(s) and, for server modes, connects and checks that
  // the server's vocabulary and tokenizer match ours.
  static std::unique_ptr<Client> connect(const ClientOptions& options);
  ~Client();

  // Text prompt: tokenized with BOS prepended; on_text receives the text as it
  // becomes final.
  Result generate(const std::string& prompt, const Request& request,
                  const std::function<void(const std::string& piece)>& on_text = {});
  // Token ids, used verbatim; on_token receives each id once final.
  Result generate_ids(const std::vector<int32_t>& prompt_ids, const Request& request,
                      const std::function<void(int32_t id)>& on_token = {});

  // Server modes only (throws otherwise).
  ServerInfo server_info();
  // One GetInfo round trip, in ms: the network's RTT plus gRPC's overhead.
  double ping_ms();

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace splitspec

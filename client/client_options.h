#pragma once
// The client's options and a request's (client.h): what a robot sets. Part
// of the public API: the installed <splitspec/client.h> holds this file's
// text (client/package/CMakeLists.txt), so it includes standard headers only.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/drafting/speculative_params.h"

namespace splitspec {

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

// A request: its speculative-decoding parameters (gamma, in
// SpeculativeParams) and the rest.
struct Request : SpeculativeParams {
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
  // The whole generation; beyond it generate() throws instead of waiting.
  std::chrono::milliseconds deadline{120000};
  // Server verifier: one round's verdict; a round that outlasts it counts as
  // a broken stream (reconnect, then fall back). 0: only the deadline.
  std::chrono::milliseconds round_timeout{0};
};

}  // namespace splitspec

#pragma once
// Operator settings of splitspec-server: a JSON file (configs/server.json
// documents every key) overridden by command-line flags.
#include <cstdint>
#include <string>
#include <vector>

#include "common/decoding/forward_emulation.h"

namespace splitspec {

struct ServerConfig {
  std::string target_dir;
  std::string listen = "127.0.0.1:50051";
  int32_t max_sessions = 8;         // open Session + Generate streams; beyond: RESOURCE_EXHAUSTED
  int32_t max_draft_tokens = 16;    // per Draft message
  int32_t max_verdict_top_k = 16;   // largest top K a session may ask with each verdict (DIAA's tables)
  int32_t max_new_tokens = 4096;    // per generation
  int32_t compute_threads = 0;      // threads of the target forward; 0: OMP_NUM_THREADS if set, else the physical cores
  std::string device = "cpu";       // where the target computes: cpu, cuda or cuda:N
  std::string kv_cache = "f32";     // element type of the sessions' KV caches: f32 or f16 (half the memory)
  // Bytes of KV cache the open streams may reserve together. Each reserves,
  // at Open, what its prompt, max_new_tokens and one largest draft can fill
  // (its cache grows into that as it generates); one that would not fit is
  // refused with RESOURCE_EXHAUSTED. 0: three quarters of the memory the
  // server may use (its cgroup's limit, else the machine's) left once the
  // target is loaded.
  int64_t kv_budget_bytes = 0;
  // Streams one bearer token may hold open at once (0: no limit beyond
  // max_sessions), so one robot's credentials cannot take every slot.
  int32_t max_sessions_per_token = 0;
  double shutdown_grace_s = 10.0;   // SIGTERM: in-flight streams get this long to finish
  // A Session stream that sends nothing for this long while no round of it
  // is being verified is ended with DEADLINE_EXCEEDED, its slot and KV cache
  // freed: silent streams cannot hold every slot (0: never).
  double session_idle_timeout_s = 60.0;
  // A Session stream open this long is ended the same way (0: never).
  double max_session_lifetime_s = 3600.0;
  int32_t max_message_bytes = 4 << 20;
  // Bytes a stream's replies may queue for a client that does not read
  // them; past that the stream is cancelled (RESOURCE_EXHAUSTED), never
  // buffered without end.
  int64_t max_send_queue_bytes = 4 << 20;
  std::string log_level = "info";
  // Early exits run for sessions that ask for early verdicts: "auto" (those
  // the target ships, at the layers in its early_exits.json or the subset in
  // early_exit_layers), or "off".
  std::string early_exits = "auto";
  std::vector<int64_t> early_exit_layers;  // empty: every shipped exit
  std::string early_exit_queue = "priority";  // send order of early verdicts: priority (confidence) or fifo
  int64_t early_exit_shortlist = 1024;        // exits score the most frequent tokens only (0: all); see EarlyExits::set_shortlist
  std::string port_file;  // when set, the bound port is written there (useful with port 0)
  std::string metrics_listen;  // HOST:PORT of the Prometheus /metrics endpoint; empty: none
  // Rounds of different sessions waiting together share one target forward.
  bool batching = true;
  int32_t max_batch_rows = 64;  // rows (draft tokens plus one per round) of one batched forward
  double batch_wait_ms = 0;     // how long a round may wait for others to join its forward
  // A slower accelerator, emulated (forward_emulation.h): "FIXED[:PER_ROW]"
  // milliseconds a forward takes at least; "off" for real times only.
  ForwardEmulation emulate_forward;
  // "auto": each final verdict advises the next round's draft length from the
  // load (the row budget shared by the open sessions); "off": no advice.
  std::string draft_hint = "auto";
  // TLS from PEM files, re-read every tls_reload_s (as is the tokens file)
  // so that a renewed certificate is served without a restart; with tls_client_ca, clients
  // must present a certificate it signed (mutual TLS).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // With tls_client_ca: only client certificates whose common name or one
  // of whose subject alternative names is listed here are served
  // (PERMISSION_DENIED otherwise); empty: any certificate the CA signed.
  std::vector<std::string> tls_client_names;
  int32_t tls_reload_s = 10;
  // A file of bearer tokens, one a line: every RPC but health must carry
  // "authorization: Bearer <one of them>" (UNAUTHENTICATED otherwise).
  std::string auth_tokens_file;
  // Tokens on a plaintext port (no tls_cert) travel in the clear: refused at
  // start unless this says the network is trusted.
  bool allow_insecure_tokens = false;
  // HOST:PORT of a plaintext grpc.health.v1-only listener, for Kubernetes'
  // gRPC probes while the main port speaks TLS; empty: none.
  std::string health_listen;
  // HOST:PORT of the OpenAI-compatible HTTP endpoint (server/http/); empty:
  // none. It serves the same TLS as the gRPC port (tls_*: certificate,
  // client CA, client names, reload) and checks the same tokens.
  std::string http_listen;
  // "same": the endpoint speaks the gRPC port's TLS; "upstream": plaintext,
  // because TLS (and any client certificate) ends in a proxy in front (an
  // ingress or a mesh). A plaintext endpoint beside a TLS gRPC port is
  // refused unless this says "upstream"; the start log repeats it.
  std::string http_tls = "same";
  // The endpoint's bounds (transport.h): head and body of a request, each
  // write of a response, open connections, requests waiting for a worker.
  double http_request_timeout_s = 10;
  double http_send_timeout_s = 10;
  int32_t http_max_connections = 256;
  int32_t http_max_queued = 64;
  // Addresses of proxies whose X-Forwarded-For names the client, for the
  // failed-token delay (failed_tokens.h) and the access log.
  std::vector<std::string> trusted_proxies;
  // The endpoint's chat template: a built-in name (llama3, chatml, phi3,
  // llama2, gemma); empty: the one the model names.
  std::string chat_template;
  // Whether the text of special tokens in chat messages' content becomes
  // those tokens (<|im_start|>system in a user's message): off, content is
  // text, so a user cannot write the template's markers.
  bool chat_special_tokens = false;
  // HTTP/2 limits on every connection (gRPC 1.51's pre-auth denial-of-service
  // advisories; deploy/README.md): streams open at once on one connection,
  // a connection with no stream closed after this long, and the pings too
  // frequent a client may send before it is disconnected.
  int32_t max_concurrent_streams = 100;
  double max_connection_idle_s = 600;
  int32_t max_ping_strikes = 2;
  // Threads gRPC may run handlers of synchronous services on (server
  // reflection's: each of its streams holds one for its whole life). A call
  // past them waits or gets RESOURCE_EXHAUSTED; the splitspec service and
  // health are callback-based and do not count.
  int32_t max_rpc_threads = 8;

  // Throws splitspec::Error naming the file and key at fault.
  static ServerConfig from_file(const std::string& path);
  void validate() const;
  // validate(), and a target given: what starting a server needs (a config
  // file may leave the target to --target, so from_file cannot ask for it).
  void validate_for_start() const;
};

}  // namespace splitspec

// splitspec-server: serves a target model for edge-cloud speculative decoding.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <fstream>
#include <iostream>

#include "common/util/error.h"
#include "server/server.h"

int main(int argc, char** argv) {
  // SIGTERM/SIGINT are taken by sigwait below, never by a handler interrupting
  // gRPC's or OpenMP's threads: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  spdlog::set_default_logger(spdlog::stderr_color_mt("splitspec-server"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  CLI::App app{"splitspec-server: verifies drafts from edge clients with the target model (splitspec.v1 over gRPC)"};
  std::string config_file;
  splitspec::ServerConfig flags;
  app.add_option("--config", config_file, "JSON config file (see configs/server.json); flags override it");
  auto* target = app.add_option("--target,--model", flags.target_dir, "Target model: a .gguf file or a directory (Hugging Face's or ours)");
  auto* listen = app.add_option("--listen", flags.listen, "HOST:PORT to listen on (port 0: any free port)");
  auto* max_sessions = app.add_option("--max-sessions", flags.max_sessions, "Concurrent streams before RESOURCE_EXHAUSTED");
  auto* max_draft = app.add_option("--max-draft-tokens", flags.max_draft_tokens, "Largest Draft accepted");
  auto* max_top_k = app.add_option("--max-verdict-top-k", flags.max_verdict_top_k,
                                   "Largest top K a session may ask with each verdict (0: none)");
  auto* max_new = app.add_option("--max-new-tokens", flags.max_new_tokens, "Largest max_new_tokens accepted");
  auto* threads = app.add_option("--threads", flags.compute_threads, "Compute threads of the target forward; default (0): OMP_NUM_THREADS if set, else the physical cores");
  auto* device = app.add_option("--device", flags.device,
                                "Where the target computes: cpu, or cuda[:N] for GPU N (in builds with the CUDA backend)");
  auto* kv_cache = app.add_option("--kv-cache", flags.kv_cache,
                                  "KV cache element type of every session: f32, or f16 for half the memory");
  auto* kv_budget = app.add_option("--kv-budget-bytes", flags.kv_budget_bytes,
                                   "KV cache bytes all sessions may reserve; a session that would not fit is refused "
                                   "(0: three quarters of the memory left after loading)");
  auto* per_token = app.add_option("--max-sessions-per-token", flags.max_sessions_per_token,
                                   "Streams one bearer token may hold open (0: no limit beyond --max-sessions)");
  auto* send_queue = app.add_option("--max-send-queue-bytes", flags.max_send_queue_bytes,
                                    "Replies a stream may queue for a client that does not read; past that it is cancelled");
  auto* grace = app.add_option("--shutdown-grace-s", flags.shutdown_grace_s, "Seconds streams get to finish on SIGTERM");
  auto* idle = app.add_option("--session-idle-timeout-s", flags.session_idle_timeout_s,
                              "End a Session that sends nothing for this long between rounds (0: never)");
  auto* lifetime = app.add_option("--max-session-lifetime-s", flags.max_session_lifetime_s,
                                  "End a Session open this long (0: never)");
  auto* streams = app.add_option("--max-concurrent-streams", flags.max_concurrent_streams,
                                 "HTTP/2 streams one connection may have open at once");
  auto* conn_idle = app.add_option("--max-connection-idle-s", flags.max_connection_idle_s,
                                   "Close a connection with no stream open for this long");
  auto* strikes = app.add_option("--max-ping-strikes", flags.max_ping_strikes,
                                 "Pings sooner than 1 s apart before a connection is closed");
  auto* rpc_threads = app.add_option("--max-rpc-threads", flags.max_rpc_threads,
                                     "Threads for synchronous handlers (server reflection's streams)");
  auto* log_level = app.add_option("--log-level", flags.log_level, "trace|debug|info|warn|error|off");
  auto* port_file = app.add_option("--port-file", flags.port_file, "Write the bound port to this file once serving");
  auto* metrics = app.add_option("--metrics-listen", flags.metrics_listen, "HOST:PORT for Prometheus GET /metrics");
  auto* http = app.add_option("--http-listen", flags.http_listen,
                              "HOST:PORT of an OpenAI-compatible HTTP endpoint: /v1/models, /v1/completions, "
                              "/v1/chat/completions (the gRPC port's TLS and tokens)");
  auto* http_tls = app.add_option("--http-tls", flags.http_tls,
                                  "same: the HTTP endpoint serves the gRPC port's TLS (default); upstream: plaintext, "
                                  "TLS ends in a proxy in front");
  auto* http_request_timeout = app.add_option("--http-request-timeout-s", flags.http_request_timeout_s,
                                              "Seconds an HTTP request's head and body may take to arrive");
  auto* http_send_timeout = app.add_option("--http-send-timeout-s", flags.http_send_timeout_s,
                                           "Seconds each write of an HTTP response may take (a client that stops reading is dropped)");
  auto* http_connections = app.add_option("--http-max-connections", flags.http_max_connections,
                                          "Open HTTP connections before new ones get 503");
  auto* http_queued = app.add_option("--http-max-queued", flags.http_max_queued,
                                     "HTTP requests waiting for a worker before new ones get 503");
  auto* trusted_proxies = app.add_option("--trusted-proxies", flags.trusted_proxies,
                                         "Proxy addresses whose X-Forwarded-For names the client (comma-separated)")
                              ->delimiter(',');
  auto* chat_template = app.add_option("--chat-template", flags.chat_template,
                                       "The HTTP endpoint's chat template: llama3, chatml, phi3, llama2 or gemma "
                                       "(default: the one the model names)");
  auto* exits = app.add_option("--early-exits", flags.early_exits, "auto (the target's early_exits.json) or off");
  auto* exit_layers = app.add_option("--early-exit-layers", flags.early_exit_layers, "Run only these exits (layer counts, e.g. 4,6)")
                          ->delimiter(',');
  auto* exit_shortlist = app.add_option("--early-exit-shortlist", flags.early_exit_shortlist,
                                       "Exits score only this many of the most frequent tokens (0: the whole vocabulary)");
  auto* exit_queue = app.add_option("--early-exit-queue", flags.early_exit_queue, "Early verdict send order: priority or fifo");
  auto* batching = app.add_option("--batching", flags.batching,
                                  "Verify rounds of different sessions waiting together in one forward (true|false)");
  auto* batch_rows = app.add_option("--max-batch-rows", flags.max_batch_rows, "Rows of one batched forward");
  auto* batch_wait = app.add_option("--batch-wait-ms", flags.batch_wait_ms,
                                    "How long a round may wait for others to join its forward (0: only those waiting)");
  std::string emulate_forward;
  auto* emulate = app.add_option("--emulate-forward-ms", emulate_forward,
                                 "Emulate a slower accelerator: each target forward takes at least FIXED + PER_ROW x "
                                 "rows ms (FIXED[:PER_ROW], e.g. 30:0.3); tokens stay real, times are labelled emulated");
  auto* hint = app.add_option("--draft-hint", flags.draft_hint,
                              "auto: advise clients' draft length from the load; off: no advice");
  auto* tls_cert = app.add_option("--tls-cert", flags.tls_cert, "PEM certificate chain: serve TLS (with --tls-key)");
  auto* tls_key = app.add_option("--tls-key", flags.tls_key, "PEM private key of --tls-cert");
  auto* tls_client_ca = app.add_option("--tls-client-ca", flags.tls_client_ca,
                                       "PEM CA: require client certificates it signed (mutual TLS)");
  auto* tls_client_names = app.add_option("--tls-client-names", flags.tls_client_names,
                                          "With --tls-client-ca: serve only client certificates with one of these "
                                          "names (common name or subject alternative name), e.g. robot-1,robot-2")
                               ->delimiter(',');
  auto* tls_reload = app.add_option("--tls-reload-s", flags.tls_reload_s,
                                    "Look at the TLS files and the tokens file this often; changed ones are re-read (no restart)");
  auto* tokens = app.add_option("--auth-tokens-file", flags.auth_tokens_file,
                                "Bearer tokens, one a line: every RPC but health must carry one");
  auto* insecure_tokens = app.add_flag("--allow-insecure-tokens", flags.allow_insecure_tokens,
                                       "Accept --auth-tokens-file without TLS (a network you trust)");
  auto* health_listen = app.add_option("--health-listen", flags.health_listen,
                                       "HOST:PORT of a plaintext grpc.health.v1-only port (probes while TLS is on)");
  bool check_config = false;
  app.add_flag("--check-config", check_config,
               "Check the configuration (file and flags) and exit: 0 if the server would start with it, else 1 with "
               "the key named; loads no model and opens no port");
  app.set_version_flag("--version", std::string("splitspec-server ") + SPLITSPEC_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version as CLI11 prints them; a usage error is one line
    // and exits 1, as the client's.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::cerr << "splitspec-server: error: " << e.what() << " (--help lists the flags)\n";
    return 1;
  }

  try {
    splitspec::ServerConfig config = config_file.empty() ? splitspec::ServerConfig{} : splitspec::ServerConfig::from_file(config_file);
    if (*target) config.target_dir = flags.target_dir;
    if (*listen) config.listen = flags.listen;
    if (*max_sessions) config.max_sessions = flags.max_sessions;
    if (*max_draft) config.max_draft_tokens = flags.max_draft_tokens;
    if (*max_new) config.max_new_tokens = flags.max_new_tokens;
    if (*max_top_k) config.max_verdict_top_k = flags.max_verdict_top_k;
    if (*threads) config.compute_threads = flags.compute_threads;
    if (*grace) config.shutdown_grace_s = flags.shutdown_grace_s;
    if (*idle) config.session_idle_timeout_s = flags.session_idle_timeout_s;
    if (*lifetime) config.max_session_lifetime_s = flags.max_session_lifetime_s;
    if (*kv_cache) config.kv_cache = flags.kv_cache;
    if (*device) config.device = flags.device;
    if (*kv_budget) config.kv_budget_bytes = flags.kv_budget_bytes;
    if (*per_token) config.max_sessions_per_token = flags.max_sessions_per_token;
    if (*send_queue) config.max_send_queue_bytes = flags.max_send_queue_bytes;
    if (*streams) config.max_concurrent_streams = flags.max_concurrent_streams;
    if (*conn_idle) config.max_connection_idle_s = flags.max_connection_idle_s;
    if (*strikes) config.max_ping_strikes = flags.max_ping_strikes;
    if (*rpc_threads) config.max_rpc_threads = flags.max_rpc_threads;
    if (*log_level) config.log_level = flags.log_level;
    if (*port_file) config.port_file = flags.port_file;
    if (*exits) config.early_exits = flags.early_exits;
    if (*metrics) config.metrics_listen = flags.metrics_listen;
    if (*http) config.http_listen = flags.http_listen;
    if (*chat_template) config.chat_template = flags.chat_template;
    if (*http_tls) config.http_tls = flags.http_tls;
    if (*http_request_timeout) config.http_request_timeout_s = flags.http_request_timeout_s;
    if (*http_send_timeout) config.http_send_timeout_s = flags.http_send_timeout_s;
    if (*http_connections) config.http_max_connections = flags.http_max_connections;
    if (*http_queued) config.http_max_queued = flags.http_max_queued;
    if (*trusted_proxies) config.trusted_proxies = flags.trusted_proxies;
    if (*exit_layers) config.early_exit_layers = flags.early_exit_layers;
    if (*exit_queue) config.early_exit_queue = flags.early_exit_queue;
    if (*exit_shortlist) config.early_exit_shortlist = flags.early_exit_shortlist;
    if (*batching) config.batching = flags.batching;
    if (*batch_rows) config.max_batch_rows = flags.max_batch_rows;
    if (*batch_wait) config.batch_wait_ms = flags.batch_wait_ms;
    if (*emulate) config.emulate_forward = splitspec::ForwardEmulation::parse(emulate_forward);
    if (*hint) config.draft_hint = flags.draft_hint;
    if (*tls_cert) config.tls_cert = flags.tls_cert;
    if (*tls_key) config.tls_key = flags.tls_key;
    if (*tls_client_ca) config.tls_client_ca = flags.tls_client_ca;
    if (*tls_client_names) config.tls_client_names = flags.tls_client_names;
    if (*tls_reload) config.tls_reload_s = flags.tls_reload_s;
    if (*tokens) config.auth_tokens_file = flags.auth_tokens_file;
    if (*insecure_tokens) config.allow_insecure_tokens = flags.allow_insecure_tokens;
    if (*health_listen) config.health_listen = flags.health_listen;
    config.validate_for_start();
    if (check_config) {
      std::cout << "splitspec-server: configuration OK (target " << config.target_dir << ", listen " << config.listen
                << ", device " << config.device << ")\n";
      return 0;
    }
    spdlog::set_level(spdlog::level::from_str(config.log_level));

    splitspec::Server server(config);
    server.start();
    if (!config.port_file.empty()) {
      // Written whole then renamed, so a reader never sees a partial number.
      const std::string tmp = config.port_file + ".tmp";
      std::ofstream(tmp) << server.port() << "\n";
      std::rename(tmp.c_str(), config.port_file.c_str());
    }
    int sig = 0;
    sigwait(&signals, &sig);
    spdlog::info("event=signal signal={}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server.shutdown();
    return 0;
  } catch (const splitspec::Error& e) {
    std::cerr << "splitspec-server: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "splitspec-server: unexpected error: " << e.what() << "\n";
    return 1;
  }
}

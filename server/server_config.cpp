#include "server/server_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <limits>
#include <set>

#include "common/backend/registry.h"
#include "common/model/model_config.h"
#include "common/tokenizer/chat_template.h"
#include "common/util/error.h"
#include "common/util/json_integer.h"

namespace splitspec {

ServerConfig ServerConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open server config");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": server config is not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(path + ": server config must be a JSON object");
  ServerConfig c;
  static const std::set<std::string> known = {"target",           "listen",          "max_sessions",
                                              "max_draft_tokens", "max_new_tokens",  "compute_threads",
                                              "shutdown_grace_s", "max_message_bytes", "log_level",
                                              "port_file",        "early_exits",     "early_exit_layers",
                                              "early_exit_queue", "early_exit_shortlist", "metrics_listen",
                                              "max_verdict_top_k", "batching",      "max_batch_rows",
                                              "batch_wait_ms",    "draft_hint",    "tls_cert",
                                              "tls_key",          "tls_client_ca", "tls_reload_s",
                                              "auth_tokens_file", "health_listen", "kv_cache", "device",
                                              "session_idle_timeout_s", "max_session_lifetime_s",
                                              "allow_insecure_tokens", "max_concurrent_streams",
                                              "max_connection_idle_s", "max_ping_strikes", "max_rpc_threads",
                                              "kv_budget_bytes", "max_sessions_per_token",
                                              "max_send_queue_bytes", "tls_client_names", "http_listen", "chat_template",
                                              "chat_special_tokens", "emulate_forward_ms", "http_tls",
                                              "http_request_timeout_s", "http_send_timeout_s",
                                              "http_max_connections", "http_max_queued", "trusted_proxies"};
  for (const auto& [key, value] : j.items())
    if (!known.count(key)) throw Error(path + ": unknown key '" + key + "'");
  try {
    if (j.contains("target")) c.target_dir = j["target"].get<std::string>();
    if (j.contains("listen")) c.listen = j["listen"].get<std::string>();
    if (j.contains("max_sessions")) c.max_sessions = json_integer<int32_t>(j["max_sessions"], "max_sessions");
    if (j.contains("max_draft_tokens")) c.max_draft_tokens = json_integer<int32_t>(j["max_draft_tokens"], "max_draft_tokens");
    if (j.contains("max_verdict_top_k")) c.max_verdict_top_k = json_integer<int32_t>(j["max_verdict_top_k"], "max_verdict_top_k");
    if (j.contains("max_new_tokens")) c.max_new_tokens = json_integer<int32_t>(j["max_new_tokens"], "max_new_tokens");
    if (j.contains("compute_threads")) c.compute_threads = json_integer<int32_t>(j["compute_threads"], "compute_threads");
    if (j.contains("shutdown_grace_s")) c.shutdown_grace_s = j["shutdown_grace_s"].get<double>();
    if (j.contains("max_concurrent_streams"))
      c.max_concurrent_streams = json_integer<int32_t>(j["max_concurrent_streams"], "max_concurrent_streams");
    if (j.contains("max_connection_idle_s")) c.max_connection_idle_s = j["max_connection_idle_s"].get<double>();
    if (j.contains("max_ping_strikes")) c.max_ping_strikes = json_integer<int32_t>(j["max_ping_strikes"], "max_ping_strikes");
    if (j.contains("max_rpc_threads")) c.max_rpc_threads = json_integer<int32_t>(j["max_rpc_threads"], "max_rpc_threads");
    if (j.contains("allow_insecure_tokens")) c.allow_insecure_tokens = j["allow_insecure_tokens"].get<bool>();
    if (j.contains("session_idle_timeout_s")) c.session_idle_timeout_s = j["session_idle_timeout_s"].get<double>();
    if (j.contains("max_session_lifetime_s")) c.max_session_lifetime_s = j["max_session_lifetime_s"].get<double>();
    if (j.contains("max_message_bytes")) c.max_message_bytes = json_integer<int32_t>(j["max_message_bytes"], "max_message_bytes");
    if (j.contains("log_level")) c.log_level = j["log_level"].get<std::string>();
    if (j.contains("port_file")) c.port_file = j["port_file"].get<std::string>();
    if (j.contains("metrics_listen")) c.metrics_listen = j["metrics_listen"].get<std::string>();
    if (j.contains("http_listen")) c.http_listen = j["http_listen"].get<std::string>();
    if (j.contains("http_tls")) c.http_tls = j["http_tls"].get<std::string>();
    if (j.contains("http_request_timeout_s")) c.http_request_timeout_s = j["http_request_timeout_s"].get<double>();
    if (j.contains("http_send_timeout_s")) c.http_send_timeout_s = j["http_send_timeout_s"].get<double>();
    if (j.contains("http_max_connections"))
      c.http_max_connections = json_integer<int32_t>(j["http_max_connections"], "http_max_connections");
    if (j.contains("http_max_queued")) c.http_max_queued = json_integer<int32_t>(j["http_max_queued"], "http_max_queued");
    if (j.contains("trusted_proxies")) {
      if (!j["trusted_proxies"].is_array()) throw Error("trusted_proxies must be an array of addresses");
      c.trusted_proxies = j["trusted_proxies"].get<std::vector<std::string>>();
    }
    if (j.contains("chat_template")) c.chat_template = j["chat_template"].get<std::string>();
    if (j.contains("chat_special_tokens")) c.chat_special_tokens = j["chat_special_tokens"].get<bool>();
    if (j.contains("early_exits")) c.early_exits = j["early_exits"].get<std::string>();
    if (j.contains("early_exit_layers")) {
      if (!j["early_exit_layers"].is_array()) throw Error("early_exit_layers must be an array of layer counts");
      c.early_exit_layers.clear();
      for (const auto& v : j["early_exit_layers"]) c.early_exit_layers.push_back(json_integer<int64_t>(v, "early_exit_layers"));
    }
    if (j.contains("early_exit_queue")) c.early_exit_queue = j["early_exit_queue"].get<std::string>();
    if (j.contains("early_exit_shortlist")) c.early_exit_shortlist = json_integer<int64_t>(j["early_exit_shortlist"], "early_exit_shortlist");
    if (j.contains("batching")) c.batching = j["batching"].get<bool>();
    if (j.contains("max_batch_rows")) c.max_batch_rows = json_integer<int32_t>(j["max_batch_rows"], "max_batch_rows");
    if (j.contains("batch_wait_ms")) c.batch_wait_ms = j["batch_wait_ms"].get<double>();
    // "30:0.3", or a number for a fixed time alone.
    if (j.contains("emulate_forward_ms"))
      c.emulate_forward = ForwardEmulation::parse(j["emulate_forward_ms"].is_number()
                                                      ? std::to_string(j["emulate_forward_ms"].get<double>())
                                                      : j["emulate_forward_ms"].get<std::string>());
    if (j.contains("draft_hint")) c.draft_hint = j["draft_hint"].get<std::string>();
    if (j.contains("tls_cert")) c.tls_cert = j["tls_cert"].get<std::string>();
    if (j.contains("tls_key")) c.tls_key = j["tls_key"].get<std::string>();
    if (j.contains("tls_client_ca")) c.tls_client_ca = j["tls_client_ca"].get<std::string>();
    if (j.contains("tls_client_names")) {
      if (!j["tls_client_names"].is_array()) throw Error("tls_client_names must be an array of names");
      c.tls_client_names = j["tls_client_names"].get<std::vector<std::string>>();
    }
    if (j.contains("tls_reload_s")) c.tls_reload_s = json_integer<int32_t>(j["tls_reload_s"], "tls_reload_s");
    if (j.contains("auth_tokens_file")) c.auth_tokens_file = j["auth_tokens_file"].get<std::string>();
    if (j.contains("health_listen")) c.health_listen = j["health_listen"].get<std::string>();
    if (j.contains("kv_cache")) c.kv_cache = j["kv_cache"].get<std::string>();
    if (j.contains("device")) c.device = j["device"].get<std::string>();
    if (j.contains("kv_budget_bytes")) c.kv_budget_bytes = json_integer<int64_t>(j["kv_budget_bytes"], "kv_budget_bytes");
    if (j.contains("max_send_queue_bytes"))
      c.max_send_queue_bytes = json_integer<int64_t>(j["max_send_queue_bytes"], "max_send_queue_bytes");
    if (j.contains("max_sessions_per_token"))
      c.max_sessions_per_token = json_integer<int32_t>(j["max_sessions_per_token"], "max_sessions_per_token");
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": " + e.what());
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return c;
}

void ServerConfig::validate_for_start() const {
  validate();
  if (target_dir.empty()) throw Error("no target model: give --target DIR (or \"target\" in the config file)");
  // The target's config (config.json, or a GGUF file's header) is read
  // here, so --check-config fails on a target that is not there; the
  // weights are left to the load.
  std::error_code ec;
  if (!std::filesystem::exists(target_dir, ec))
    throw Error("target " + target_dir + ": no such file or directory (give --target DIR|FILE.gguf)");
  load_model_config(target_dir);
  // A device this program was built without fails here, not at load.
  const Device d = parse_device(device);
  const std::vector<std::string> kinds = backend_kinds();
  if (std::find(kinds.begin(), kinds.end(), d.kind) == kinds.end()) {
    std::string have;
    for (const std::string& k : kinds) have += (have.empty() ? "" : ", ") + k;
    throw Error("device " + device + ": this splitspec-server was built without the " + d.kind +
                " backend (it has: " + have + "); build it where nvcc is found, or with -DSPLITSPEC_CUDA=ON");
  }
  if (!auth_tokens_file.empty() && tls_cert.empty() && !allow_insecure_tokens)
    throw Error("auth_tokens_file on a plaintext port: clients' tokens would cross the network in the clear; serve "
                "TLS (tls_cert, tls_key), or set allow_insecure_tokens (--allow-insecure-tokens) for a network you trust");
}

void ServerConfig::validate() const {
  if (listen.empty() || listen.find(':') == std::string::npos) throw Error("listen must be HOST:PORT, got '" + listen + "'");
  if (max_sessions < 1) throw Error("max_sessions must be at least 1");
  if (max_draft_tokens < 1) throw Error("max_draft_tokens must be at least 1");
  if (max_new_tokens < 1) throw Error("max_new_tokens must be at least 1");
  if (max_verdict_top_k < 0 || max_verdict_top_k > 256) throw Error("max_verdict_top_k must be in [0, 256]");
  if (compute_threads < 0) throw Error("compute_threads must be >= 0 (0: OMP_NUM_THREADS if set, else the physical cores)");
  // Finite: the grace becomes a deadline, and an infinite one is undefined.
  if (!(shutdown_grace_s >= 0 && shutdown_grace_s <= 86400))
    throw Error("shutdown_grace_s must be a number of seconds in [0, 86400]");
  if (!(session_idle_timeout_s >= 0 && session_idle_timeout_s <= 604800))
    throw Error("session_idle_timeout_s must be a number of seconds in [0, 604800] (0: never)");
  if (!(max_session_lifetime_s >= 0 && max_session_lifetime_s <= 604800))
    throw Error("max_session_lifetime_s must be a number of seconds in [0, 604800] (0: never)");
  if (max_message_bytes < 1024) throw Error("max_message_bytes must be at least 1024");
  if (max_send_queue_bytes < 1024) throw Error("max_send_queue_bytes must be at least 1024");
  if (early_exits != "auto" && early_exits != "off") throw Error("early_exits must be auto or off");
  if (early_exit_shortlist < 0) throw Error("early_exit_shortlist must be >= 0 (0: the whole vocabulary)");
  if (early_exit_queue != "priority" && early_exit_queue != "fifo") throw Error("early_exit_queue must be priority or fifo");
  if (max_batch_rows < 1) throw Error("max_batch_rows must be at least 1");
  if (!(batch_wait_ms >= 0 && batch_wait_ms <= 1000)) throw Error("batch_wait_ms must be in [0, 1000]");
  if (draft_hint != "auto" && draft_hint != "off") throw Error("draft_hint must be auto or off");
  if (kv_cache != "f32" && kv_cache != "f16") throw Error("kv_cache must be f32 or f16, got '" + kv_cache + "'");
  parse_device(device);
  if (kv_budget_bytes < 0) throw Error("kv_budget_bytes must be >= 0 (0: three quarters of the memory left after loading)");
  if (max_sessions_per_token < 0) throw Error("max_sessions_per_token must be >= 0 (0: no limit beyond max_sessions)");
  if (tls_cert.empty() != tls_key.empty()) throw Error("tls_cert and tls_key go together: give both, or neither for plaintext");
  if (!tls_client_ca.empty() && tls_cert.empty()) throw Error("tls_client_ca (mutual TLS) needs tls_cert and tls_key");
  if (!tls_client_names.empty() && tls_client_ca.empty())
    throw Error("tls_client_names needs tls_client_ca: only a client certificate carries a name to check");
  for (const std::string& n : tls_client_names)
    if (n.empty()) throw Error("tls_client_names holds an empty name");
  if (tls_reload_s < 1) throw Error("tls_reload_s must be at least 1");
  if (max_concurrent_streams < 1) throw Error("max_concurrent_streams must be at least 1");
  if (!(max_connection_idle_s >= 1 && max_connection_idle_s <= 86400))
    throw Error("max_connection_idle_s must be a number of seconds in [1, 86400]");
  if (max_ping_strikes < 1) throw Error("max_ping_strikes must be at least 1 (each strike is a ping sooner than 1 s)");
  if (max_rpc_threads < 2) throw Error("max_rpc_threads must be at least 2 (gRPC keeps one polling)");
  if (!chat_template.empty()) {
    const std::vector<std::string> names = chat_template_names();
    if (std::find(names.begin(), names.end(), chat_template) == names.end())
      throw Error("chat_template must be a built-in template's name (llama3, chatml, phi3, llama2, gemma), got '" +
                  chat_template + "'");
  }
  if (!http_listen.empty() && http_listen.find(':') == std::string::npos)
    throw Error("http_listen must be HOST:PORT, got '" + http_listen + "'");
  if (http_tls != "same" && http_tls != "upstream")
    throw Error("http_tls must be same (the gRPC port's tls_* settings) or upstream (TLS ends in a proxy in front)");
  // The HTTP door is never weaker than the gRPC door by accident.
  if (!http_listen.empty() && http_tls == "upstream" && tls_cert.empty())
    throw Error("http_tls is upstream but the gRPC port has no TLS either: set http_tls to same (the default); "
                "upstream is for a plaintext endpoint behind a TLS-terminating proxy while gRPC speaks TLS");
  if (!http_listen.empty() && http_tls == "same" && tls_cert.empty() && !auth_tokens_file.empty() && !allow_insecure_tokens)
    throw Error("http_listen speaks plaintext HTTP (no tls_cert), which would carry the bearer tokens in the clear: "
                "serve TLS (tls_cert, tls_key), or set allow_insecure_tokens for a network you trust");
  if (!(http_request_timeout_s > 0 && http_request_timeout_s <= 3600))
    throw Error("http_request_timeout_s must be a number of seconds in (0, 3600]");
  if (!(http_send_timeout_s > 0 && http_send_timeout_s <= 3600))
    throw Error("http_send_timeout_s must be a number of seconds in (0, 3600]");
  if (http_max_connections < 1) throw Error("http_max_connections must be at least 1");
  if (http_max_queued < 0) throw Error("http_max_queued must be >= 0");
  for (const std::string& a : trusted_proxies)
    if (a.empty()) throw Error("trusted_proxies holds an empty address");
  if (!health_listen.empty() && health_listen.find(':') == std::string::npos)
    throw Error("health_listen must be HOST:PORT, got '" + health_listen + "'");
  static const std::set<std::string> levels = {"trace", "debug", "info", "warn", "error", "off"};
  if (!levels.count(log_level)) throw Error("log_level must be one of trace|debug|info|warn|error|off");
}

}  // namespace splitspec

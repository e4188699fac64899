// `splitspec bench load`: N concurrent sessions against splitspec-server for
// T seconds (or M generations each), with the server's batching on and off
// in one run. Each configuration gets its own server process (so its RSS is
// its own), and the configurations run interleaved A B B A so that both see
// the same machine drift. Reports the server's tokens per second, per-round
// and per-token latency percentiles as the client sees them, errors by
// status, and the server's peak RSS.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/commands/bench_commands.h"
#include "client/cli/prompts.h"
#include "bench/commands/server_process.h"
#include "bench/commands/speedup_interval.h"
#include "client/client.h"
#include "common/model/model_config.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/error.h"
#include "common/util/percentile.h"
#include "common/util/stopwatch.h"
#include "client/cli/speculative_flags.h"

namespace splitspec::cli {

namespace {

namespace fs = std::filesystem;

struct LoadArgs {
  std::string target_dir;
  std::string draft_dir;
  std::string prompts;
  std::string server_bin;  // default: splitspec-server beside this binary
  std::string drafter = "model";
  std::vector<int32_t> sessions = {1, 8, 32};
  std::vector<std::string> batching = {"on", "off"};
  double seconds = 20;
  int32_t generations = 0;  // per session; > 0 replaces seconds
  int32_t max_new_tokens = 64;
  SpeculativeParams speculative;  // --gamma
  int server_threads = 1;
  int client_threads = 1;
  double batch_wait_ms = 0;
  int32_t max_batch_rows = 64;
  std::string draft_hint = "auto";
  int repeats = 1;  // ABBA blocks
  bool json = false;
};

// One phase: `sessions` clients at once against a fresh server.
struct Phase {
  Phase(bool batching, int32_t sessions) : batching(batching), sessions(sessions) {}
  bool batching;
  int32_t sessions;
  int64_t tokens = 0, generations = 0, rounds = 0, drafted = 0, accepted = 0;
  double wall_s = 0, rss_mb = 0;
  double forwards = 0, batched_rounds = 0, forward_ms = 0;  // the server's, from its /metrics
  std::vector<double> round_ms, token_ms;
  std::map<std::string, int64_t> errors;  // by the status the message names
};

// The gRPC status an error message names (the client quotes it), else its
// first words.
std::string status_of(const std::string& what) {
  for (const char* s : {"UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "INVALID_ARGUMENT", "INTERNAL",
                        "CANCELLED", "FAILED_PRECONDITION", "UNAUTHENTICATED"})
    if (what.find(s) != std::string::npos) return s;
  return what.substr(0, 60);
}

// A gap this long between two tokens means a new round: the tokens of one
// verdict reach the callback back to back, microseconds apart, and no round
// (a target forward over the network) is this short.
constexpr double kRoundGapMs = 0.25;

void run_phase(const LoadArgs& a, const std::vector<std::vector<int32_t>>& prompts, Phase& p, const fs::path& dir) {
  ServerProcess server(a.server_bin,
                       {"--target", a.target_dir, "--threads", std::to_string(a.server_threads), "--max-sessions",
                        std::to_string(std::max(p.sessions, 1)), "--batching", p.batching ? "true" : "false",
                        "--batch-wait-ms", std::to_string(a.batch_wait_ms), "--max-batch-rows",
                        std::to_string(a.max_batch_rows), "--draft-hint", a.draft_hint},
                       dir, "bench load");
  ClientOptions o;
  o.verifier = VerifierKind::kServer;
  o.drafter = a.drafter;
  o.server = server.address();
  o.draft_dir = a.draft_dir;
  o.threads = a.client_threads;
  Request req;
  req.max_new_tokens = a.max_new_tokens;
  req.ignore_eos = true;
  static_cast<SpeculativeParams&>(req) = a.speculative;
  req.deadline = std::chrono::minutes(10);
  std::mutex mu;
  std::atomic<size_t> next_prompt{0};
  const auto start = SteadyClock::now();
  const auto stop_at = start + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(a.seconds));
  std::vector<std::thread> threads;
  for (int32_t s = 0; s < p.sessions; ++s)
    threads.emplace_back([&] {
      std::unique_ptr<Client> client;
      try {
        client = Client::connect(o);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        p.errors[status_of(e.what())] += 1;
        return;
      }
      for (int32_t g = 0; a.generations > 0 ? g < a.generations : SteadyClock::now() < stop_at; ++g) {
        const std::vector<int32_t>& prompt = prompts[next_prompt.fetch_add(1) % prompts.size()];
        std::vector<double> rounds, tokens;
        SteadyClock::time_point last = SteadyClock::now(), round_start = last;
        try {
          const Result r = client->generate_ids(prompt, req, [&](int32_t) {
            const auto now = SteadyClock::now();
            const double gap = ms_between(last, now);
            tokens.push_back(gap);
            if (gap >= kRoundGapMs || rounds.empty()) {
              rounds.push_back(ms_between(round_start, now));
              round_start = now;
            }
            last = now;
          });
          std::lock_guard<std::mutex> lock(mu);
          p.generations += 1;
          p.tokens += r.stats.new_tokens;
          p.rounds += r.stats.rounds;
          p.drafted += r.stats.drafted_tokens;
          p.accepted += r.stats.accepted_tokens;
          // The first round carries the prompt's prefill: not a steady round.
          p.round_ms.insert(p.round_ms.end(), rounds.begin() + std::min<size_t>(1, rounds.size()), rounds.end());
          p.token_ms.insert(p.token_ms.end(), tokens.begin() + std::min<size_t>(1, tokens.size()), tokens.end());
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu);
          p.errors[status_of(e.what())] += 1;
        }
      }
    });
  for (auto& t : threads) t.join();
  p.wall_s = ms_since(start) / 1000.0;
  p.rss_mb = server.peak_rss_mb();
  const std::string m = server.metrics();
  p.forwards = metric_sample(m, "splitspec_batch_size_rounds_count");
  p.batched_rounds = metric_sample(m, "splitspec_batch_size_rounds_sum");
  p.forward_ms = metric_sample(m, "splitspec_batch_forward_time_ms_sum");
}

int run_bench_load(LoadArgs a) {
  a.server_bin = find_server_bin(a.server_bin, "bench load");
  for (const std::string& b : a.batching)
    if (b != "on" && b != "off") throw Error("bench load: --batching takes on and/or off, got '" + b + "'");
  for (int32_t s : a.sessions)
    if (s < 1) throw Error("bench load: --sessions must be at least 1");
  Tokenizer tok(a.target_dir);
  std::vector<std::string> texts;
  if (!a.prompts.empty()) texts = read_prompts(a.prompts, 0);
  else texts = {"The ship sailed", "Once upon a time", "The President said that", "It was a dark and stormy night"};
  // The target's context bounds the prompt, as on the server.
  const int64_t context = load_model_config(a.target_dir).max_position_embeddings;
  const int64_t keep = context - a.max_new_tokens - 16 - 1;
  if (keep < 2) throw Error("bench load: max-new-tokens leaves no room for a prompt in the context of " + std::to_string(context));
  const std::vector<std::vector<int32_t>> prompts = encode_prompts(texts, tok, keep);
  const fs::path dir = fs::temp_directory_path() / ("splitspec-bench-load-" + std::to_string(getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};

  // Phases in ABBA order per session count: each batching setting runs
  // first once and last once.
  std::vector<Phase> phases;
  for (int32_t s : a.sessions)
    for (int r = 0; r < a.repeats; ++r) {
      std::vector<std::string> order = a.batching;
      std::vector<std::string> back(order.rbegin(), order.rend());
      order.insert(order.end(), back.begin(), back.end());
      for (const std::string& b : order) phases.emplace_back(b == "on", s);
    }
  for (Phase& p : phases) {
    run_phase(a, prompts, p, dir);
    if (!a.json)
      std::fprintf(stderr, "bench load: sessions %d batching %s: %.1f tokens/s\n", p.sessions, p.batching ? "on" : "off",
                   static_cast<double>(p.tokens) / p.wall_s);
  }
  // Merge each configuration's phases.
  std::map<std::pair<int32_t, bool>, Phase> merged;
  for (const Phase& p : phases) {
    auto [it, fresh] = merged.try_emplace({p.sessions, p.batching}, p.batching, p.sessions);
    Phase& m = it->second;
    m.tokens += p.tokens;
    m.generations += p.generations;
    m.rounds += p.rounds;
    m.drafted += p.drafted;
    m.accepted += p.accepted;
    m.wall_s += p.wall_s;
    m.forwards += p.forwards;
    m.batched_rounds += p.batched_rounds;
    m.forward_ms += p.forward_ms;
    m.rss_mb = std::max(m.rss_mb, p.rss_mb);
    m.round_ms.insert(m.round_ms.end(), p.round_ms.begin(), p.round_ms.end());
    m.token_ms.insert(m.token_ms.end(), p.token_ms.begin(), p.token_ms.end());
    for (const auto& [k, v] : p.errors) m.errors[k] += v;
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [key, m] : merged) {
    nlohmann::json errors = nlohmann::json::object();
    for (const auto& [k, v] : m.errors) errors[k] = v;
    rows.push_back({{"sessions", m.sessions},
                    {"batching", m.batching},
                    {"tokens_per_s", m.wall_s > 0 ? static_cast<double>(m.tokens) / m.wall_s : 0.0},
                    {"tokens", m.tokens},
                    {"generations", m.generations},
                    {"tokens_per_round", m.rounds ? static_cast<double>(m.tokens) / static_cast<double>(m.rounds) : 0.0},
                    {"acceptance_rate", m.drafted ? static_cast<double>(m.accepted) / static_cast<double>(m.drafted) : 0.0},
                    {"round_ms_p50", percentile(m.round_ms, 50)},
                    {"round_ms_p99", percentile(m.round_ms, 99)},
                    {"token_ms_p50", percentile(m.token_ms, 50)},
                    {"token_ms_p99", percentile(m.token_ms, 99)},
                    {"server_peak_rss_mb", m.rss_mb},
                    {"server_forwards", m.forwards},
                    {"rounds_per_forward", m.forwards > 0 ? m.batched_rounds / m.forwards : 0.0},
                    // Of the phase's wall time, the share the server's compute worker spent in forwards.
                    {"server_busy", m.wall_s > 0 ? m.forward_ms / (m.wall_s * 1000.0) : 0.0},
                    {"errors", errors}});
  }
  // Batching on over off, per session count: the tokens/s ratio with a 95%
  // bootstrap interval over the ABBA slots (the k-th "on" phase is paired
  // with the k-th "off" one, so a drift of the machine between blocks widens
  // the interval instead of biasing the ratio).
  nlohmann::json ratios = nlohmann::json::array();
  for (int32_t s : a.sessions) {
    std::vector<PromptCost> on, off;
    for (const Phase& p : phases)
      if (p.sessions == s && p.wall_s > 0)
        (p.batching ? on : off).push_back({p.wall_s * 1000.0, static_cast<double>(p.tokens)});
    if (on.empty() || on.size() != off.size()) continue;
    nlohmann::json r = {{"sessions", s}, {"on_over_off_tokens_per_s", speedup(off, on)}, {"pairs", on.size()}};
    if (on.size() >= 2) {
      const Interval iv = speedup_interval(off, on);
      r["ci95"] = {iv.lo, iv.hi};
    }
    ratios.push_back(r);
  }
  nlohmann::json out = {{"drafter", a.drafter},
                        {"target", a.target_dir},
                        {"max_new_tokens", a.max_new_tokens},
                        {"gamma", a.speculative.gamma},
                        {"seconds_per_phase", a.generations > 0 ? 0.0 : a.seconds},
                        {"generations_per_session", a.generations},
                        {"server_threads", a.server_threads},
                        {"client_threads_per_session", a.client_threads},
                        {"batch_wait_ms", a.batch_wait_ms},
                        {"max_batch_rows", a.max_batch_rows},
                        {"draft_hint", a.draft_hint},
                        {"order", "ABBA per session count"},
                        {"rows", rows},
                        {"batching_ratios", ratios}};
  if (a.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%8s %8s %10s %8s %8s %9s %9s %9s %9s %8s %8s %6s  %s\n", "sessions", "batching", "tokens/s", "tok/rnd",
              "accept", "round p50", "round p99", "token p50", "token p99", "rnd/fwd", "busy", "RSS MB", "errors");
  for (const auto& r : rows) {
    std::string errs;
    for (const auto& [k, v] : r["errors"].items()) errs += k + "=" + std::to_string(v.get<int64_t>()) + " ";
    std::printf("%8d %8s %10.1f %8.2f %8.2f %9.2f %9.2f %9.2f %9.2f %8.2f %8.2f %6.1f  %s\n", r["sessions"].get<int>(),
                r["batching"].get<bool>() ? "on" : "off", r["tokens_per_s"].get<double>(),
                r["tokens_per_round"].get<double>(), r["acceptance_rate"].get<double>(), r["round_ms_p50"].get<double>(),
                r["round_ms_p99"].get<double>(), r["token_ms_p50"].get<double>(), r["token_ms_p99"].get<double>(),
                r["rounds_per_forward"].get<double>(), r["server_busy"].get<double>(),
                r["server_peak_rss_mb"].get<double>(), errs.empty() ? "none" : errs.c_str());
  }
  for (const auto& r : ratios) {
    std::printf("sessions %d: batching on/off tokens/s %.2fx", r["sessions"].get<int>(),
                r["on_over_off_tokens_per_s"].get<double>());
    if (r.contains("ci95"))
      std::printf(" (95%% CI %.2f-%.2f over %d ABBA pairs)", r["ci95"][0].get<double>(), r["ci95"][1].get<double>(),
                  r["pairs"].get<int>());
    std::printf("\n");
  }
  return 0;
}

}  // namespace

std::function<int()> add_bench_load(CLI::App& bench) {
  auto a = std::make_shared<LoadArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "load", "N concurrent sessions against splitspec-server, batching on and off in one run (ABBA)");
  cmd->add_option("--target,--model", a->target_dir, "Target model directory (each phase starts a server on it)")->required();
  cmd->add_option("--draft", a->draft_dir, "Draft model directory (drafters that need one)");
  cmd->add_option("--drafter", a->drafter, "none (cloud-ar), model, model-tree, lut, pld, recurrent")->capture_default_str();
  cmd->add_option("--prompts", a->prompts, "JSONL prompts, e.g. ../shared/prompts/spec_bench.jsonl (default: a few built in)");
  cmd->add_option("--sessions", a->sessions, "Concurrent session counts, one phase pair each")->delimiter(',')->capture_default_str();
  cmd->add_option("--batching", a->batching, "on, off, or on,off")->delimiter(',')->capture_default_str();
  cmd->add_option("--seconds", a->seconds, "Length of each phase")->capture_default_str();
  cmd->add_option("--generations", a->generations, "Generations per session per phase instead of --seconds");
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "Tokens per generation (EOS ignored)")->capture_default_str();
  add_speculative_flags(cmd, a->speculative);
  cmd->add_option("--server-threads", a->server_threads, "The server's compute threads")->capture_default_str();
  cmd->add_option("--client-threads", a->client_threads, "Each session's drafting threads")->capture_default_str();
  cmd->add_option("--batch-wait-ms", a->batch_wait_ms, "The server's batch_wait_ms")->capture_default_str();
  cmd->add_option("--max-batch-rows", a->max_batch_rows, "The server's max_batch_rows")->capture_default_str();
  cmd->add_option("--draft-hint", a->draft_hint, "The server's draft_hint: auto or off")->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "ABBA blocks per session count")->capture_default_str();
  cmd->add_option("--server-bin", a->server_bin, "splitspec-server binary (default: beside this one)");
  cmd->add_flag("--json", a->json, "Print JSON");
  return [a] { return run_bench_load(*a); };
}

}  // namespace splitspec::cli

// `splitspec bench edge-cloud`: cloud-ar against edge-sd through the netem
// proxy at several one-way delays, with the paper's Table 4 latency model
// evaluated on the T_p, T_q and T_c measured in the same run.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "client/cli/commands.h"
#include "client/cli/prompts.h"
#include "client/client.h"
#include "client/netem_proxy.h"
#include "common/error.h"
#include "common/tokenizer.h"

namespace splitspec::cli {

namespace {

struct EdgeBenchArgs {
  std::string server;
  std::string draft_dir;
  std::string prompts;
  int32_t num_prompts = 40;
  int32_t max_new_tokens = 128;
  int32_t gamma = 4;
  std::vector<double> delays_ms = {0, 2, 10, 50};
  double jitter_ms = 0;
  double rate_kbps = 0;
  int32_t pings = 21;
  int threads = 1;
  bool json = false;
};

// Sums over every prompt of one mode at one delay.
struct ModeTotals {
  int64_t prompts = 0, tokens = 0, rounds = 0, target_forwards = 0, draft_forwards = 0;
  double wall_ms = 0, server_forward_ms = 0, draft_ms = 0, verify_wait_ms = 0, server_ms = 0, accepted = 0;

  void add(const Result& r) {
    const Stats& s = r.stats;
    prompts += 1;
    tokens += s.new_tokens;
    rounds += s.rounds;
    target_forwards += s.target_forwards;
    draft_forwards += s.draft_forwards;  // one drafted token each
    wall_ms += s.wall_ms;
    server_forward_ms += s.server_forward_ms;
    draft_ms += s.draft_ms;
    verify_wait_ms += s.verify_wait_ms;
    server_ms += s.server_ms;
    accepted += s.acceptance_rate * static_cast<double>(s.draft_forwards);
  }
  double per_token(double total) const { return tokens ? total / static_cast<double>(tokens) : 0.0; }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::unique_ptr<Client> connect_mode(Mode mode, const EdgeBenchArgs& a, const std::string& address) {
  ClientOptions o;
  o.mode = mode;
  o.server = address;
  o.draft_dir = a.draft_dir;
  o.threads = a.threads;
  return Client::connect(o);
}

int run_bench_edge_cloud(const EdgeBenchArgs& a) {
  const std::vector<std::string> texts = read_prompts(a.prompts, a.num_prompts);
  Tokenizer tok(a.draft_dir);
  // The target's context bounds the prompt: keep each prompt's last tokens.
  int32_t context = 0;
  {
    ClientOptions o;
    o.mode = Mode::kCloudAr;
    o.server = a.server;
    o.draft_dir = a.draft_dir;
    context = Client::connect(o)->server_info().max_context;
  }
  std::vector<std::vector<int32_t>> prompts;
  const int64_t keep = context - a.max_new_tokens - a.gamma - 1;
  if (keep < 2) throw Error("bench edge-cloud: max-new-tokens leaves no room for a prompt in the context of " + std::to_string(context));
  for (const std::string& t : texts) {
    std::vector<int32_t> ids = tok.encode(t);
    ids.insert(ids.begin(), tok.bos_id());
    if (static_cast<int64_t>(ids.size()) > keep) ids.erase(ids.begin() + 1, ids.end() - (keep - 1));
    prompts.push_back(std::move(ids));
  }
  Request req;
  req.max_new_tokens = a.max_new_tokens;
  req.ignore_eos = true;  // every generation has n tokens, as in the latency model
  req.gamma = a.gamma;
  req.deadline = std::chrono::minutes(10);

  nlohmann::json rows = nlohmann::json::array();
  for (double delay : a.delays_ms) {
    NetemOptions n;
    n.upstream = a.server;
    n.delay_ms = delay;
    n.jitter_ms = a.jitter_ms;
    n.rate_kbps = a.rate_kbps;
    NetemProxy proxy(n);
    proxy.start();
    const std::string address = "127.0.0.1:" + std::to_string(proxy.port());
    auto ar = connect_mode(Mode::kCloudAr, a, address);
    auto sd = connect_mode(Mode::kEdgeSd, a, address);
    // T_c: half the median round trip of an empty call through the link.
    std::vector<double> rtts;
    for (int i = 0; i < a.pings; ++i) rtts.push_back(ar->ping_ms());
    const double tc = median(rtts) / 2.0;
    ModeTotals tar, tsd;
    // Interleaved per prompt so both modes see the same machine noise.
    for (const auto& p : prompts) {
      tar.add(ar->generate_ids(p, req));
      tsd.add(sd->generate_ids(p, req));
    }
    const double n_tokens = static_cast<double>(tsd.tokens);
    const double tq_ar = tar.server_forward_ms / static_cast<double>(std::max<int64_t>(tar.target_forwards, 1));
    const double tq_sd = tsd.server_forward_ms / static_cast<double>(std::max<int64_t>(tsd.rounds, 1));
    const double tp = tsd.draft_ms / static_cast<double>(std::max<int64_t>(tsd.draft_forwards, 1));
    const double tau = tsd.rounds ? n_tokens / static_cast<double>(tsd.rounds) : 0.0;
    // Table 4, per generated token: AR = (2 T_c + n T_q) / n; SD = (1/tau)(2 T_c + gamma T_p + T_q).
    const double ar_model = (2.0 * tc * static_cast<double>(tar.prompts) + tar.server_forward_ms) / static_cast<double>(tar.tokens);
    const double sd_model = (2.0 * tc + a.gamma * tp + tq_sd) / tau;
    const double ar_measured = tar.per_token(tar.wall_ms), sd_measured = tsd.per_token(tsd.wall_ms);
    rows.push_back({{"delay_ms", delay},
                    {"T_c_ms", tc},
                    {"T_p_ms", tp},
                    {"T_q_ar_ms", tq_ar},
                    {"T_q_sd_ms", tq_sd},
                    {"tau", tau},
                    {"acceptance_rate", tsd.draft_forwards ? tsd.accepted / static_cast<double>(tsd.draft_forwards) : 0.0},
                    {"cloud_ar_ms_per_token", ar_measured},
                    {"cloud_ar_model_ms_per_token", ar_model},
                    {"edge_sd_ms_per_token", sd_measured},
                    {"edge_sd_model_ms_per_token", sd_model},
                    {"speedup_ar_to_sd", ar_measured / sd_measured},
                    {"target_forwards_per_token_ar", tar.per_token(static_cast<double>(tar.target_forwards))},
                    {"target_forwards_per_token_sd", tsd.per_token(static_cast<double>(tsd.target_forwards))},
                    {"network_rtt_ms_sd", tsd.rounds ? (tsd.verify_wait_ms - tsd.server_ms) / static_cast<double>(tsd.rounds) : 0.0},
                    {"prompts", tsd.prompts},
                    {"tokens", tsd.tokens}});
    if (!a.json) std::fprintf(stderr, "delay %.0f ms done\n", delay);
  }

  if (a.json) {
    std::cout << nlohmann::json{{"gamma", a.gamma}, {"max_new_tokens", a.max_new_tokens}, {"rows", rows}}.dump(2) << std::endl;
    return 0;
  }
  std::printf("%zu prompts x %d new tokens, gamma %d; latencies in ms per generated token; model = Table 4 on measured T_p, T_q, T_c\n\n",
              prompts.size(), a.max_new_tokens, a.gamma);
  std::printf("| one-way delay | T_c | T_p | T_q (AR) | T_q (SD) | tau | acceptance | cloud-ar | model | gap | edge-sd | model | gap | AR/SD | forwards/token AR | SD |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    const double ar = r["cloud_ar_ms_per_token"], arm = r["cloud_ar_model_ms_per_token"];
    const double sd = r["edge_sd_ms_per_token"], sdm = r["edge_sd_model_ms_per_token"];
    std::printf("| %.0f ms | %.2f | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %+.1f%% | %.2f | %.2f | %+.1f%% | %.2fx | %.2f | %.3f |\n",
                r["delay_ms"].get<double>(), r["T_c_ms"].get<double>(), r["T_p_ms"].get<double>(), r["T_q_ar_ms"].get<double>(),
                r["T_q_sd_ms"].get<double>(), r["tau"].get<double>(), r["acceptance_rate"].get<double>(), ar, arm,
                100.0 * (ar - arm) / arm, sd, sdm, 100.0 * (sd - sdm) / sdm, ar / sd,
                r["target_forwards_per_token_ar"].get<double>(), r["target_forwards_per_token_sd"].get<double>());
  }
  return 0;
}

}  // namespace

std::function<int()> add_bench_edge_cloud(CLI::App& bench) {
  auto a = std::make_shared<EdgeBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "edge-cloud", "cloud-ar vs edge-sd through a netem link at several delays, next to the Table 4 latency model");
  cmd->add_option("--server", a->server, "splitspec-server HOST:PORT (the bench puts its own netem proxy in front)")->required();
  cmd->add_option("--draft", a->draft_dir, "Draft model directory (its tokenizer encodes the prompts)")->required();
  cmd->add_option("--prompts", a->prompts, "JSONL prompts (turns[0] or prompt), e.g. ../shared/prompts/spec_bench.jsonl")->required();
  cmd->add_option("--num-prompts", a->num_prompts, "Prompts to use, from the top")->capture_default_str();
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "Tokens per generation (EOS ignored)")->capture_default_str();
  cmd->add_option("--gamma", a->gamma, "Draft tokens per round")->capture_default_str();
  cmd->add_option("--delays-ms", a->delays_ms, "One-way delays to emulate")->delimiter(',')->capture_default_str();
  cmd->add_option("--jitter-ms", a->jitter_ms, "Jitter of the emulated link")->capture_default_str();
  cmd->add_option("--rate-kbps", a->rate_kbps, "Bandwidth of the emulated link; 0 is unlimited")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Compute threads of the draft")->capture_default_str();
  cmd->add_flag("--json", a->json, "Print the rows as JSON");
  return [a]() { return run_bench_edge_cloud(*a); };
}

}  // namespace splitspec::cli

// `splitspec bench edge-cloud`: modes through the netem proxy at several
// one-way delays (cloud-ar, edge-sd and edge-fsd by default; any alias or
// VERIFIER+DRAFTER, e.g. server+model-tree), with the early-exit edge-cloud
// paper's Table 4 latency model evaluated on the T_p, T_q and T_c measured in
// the same run, and each speedup with its bootstrap interval over the prompts.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <tuple>
#include <nlohmann/json.hpp>

#include "bench/commands/bench_edge_cloud.h"
#include "bench/commands/bench_commands.h"
#include "client/cli/netem_proxy.h"
#include "client/cli/prompts.h"
#include "bench/commands/row_spec.h"
#include "bench/commands/speedup_interval.h"
#include "client/cli/stats_json.h"
#include "client/client.h"
#include "common/drafting/registry.h"
#include "common/drafting/tree_options.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/error.h"
#include "client/cli/speculative_flags.h"

namespace splitspec::cli {

namespace {

// Every prompt of one mode at one delay: the sum of their Stats, and each
// prompt's cost for the speedups' intervals.
struct ModeTotals {
  int64_t prompts = 0;
  Stats sum;
  std::vector<PromptCost> per_prompt;  // in prompt order

  void add(const Result& r) {
    prompts += 1;
    per_prompt.push_back({r.stats.wall_ms, static_cast<double>(r.stats.new_tokens)});
    sum += r.stats;
  }
  double per_token(double total) const { return sum.new_tokens ? total / static_cast<double>(sum.new_tokens) : 0.0; }
  double per_round(double total) const { return sum.rounds ? total / static_cast<double>(sum.rounds) : 0.0; }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// A mode, with its drafter's options after it: "server+mtp/shortlist=4096/
// ranking=r.json" (row_spec.h).
ClientOptions mode_options(const std::string& mode) {
  const RowSpec row = parse_row_spec(mode);
  ClientOptions o = with_mode(ClientOptions{}, row.name);
  for (const RowSetting& setting : row.settings) {
    if (!setting.has_value || setting.key.empty())
      throw Error("bench edge-cloud: '" + setting.text + "' in '" + mode +
                  "' is not a drafter option KEY=VALUE ('/' separates them, so a file there is named from the "
                  "working directory, without '/')");
    o.drafter_options[setting.key] = setting.value;
  }
  return o;
}

std::unique_ptr<Client> connect_mode(const ClientOptions& mode, const EdgeBenchArgs& a, const std::string& address) {
  ClientOptions o = mode;
  o.server = address;
  if (o.drafter == "model-tree") {
    TreeOptions t = a.tree;
    t.fallback = !a.no_fallback;
    // The tree flags; the mode's own options win.
    for (auto& [key, value] : t.options()) o.drafter_options.insert({key, value});
  }
  o.draft_dir = a.draft_dir;
  o.threads = a.threads;
  o.predraft_threads = a.predraft_threads;
  o.predraft_queue = a.predraft_queue;
  o.predraft_adaptive = a.predraft_adaptive;
  o.emulate_draft_factor = a.emulate_draft_factor;
  return Client::connect(o);
}

}  // namespace

std::vector<std::vector<int32_t>> edge_cloud_prompts(const EdgeBenchArgs& a) {
  const std::vector<std::string> texts = read_prompts(a.prompts, a.num_prompts);
  Tokenizer tok(a.draft_dir);
  // The target's context bounds the prompt: keep each prompt's last tokens.
  int32_t context = 0;
  {
    ClientOptions o = with_mode(ClientOptions{}, Mode::kCloudAr);
    o.server = a.server;
    o.draft_dir = a.draft_dir;
    context = Client::connect(o)->server_info().max_context;
  }
  const int64_t keep = context - a.max_new_tokens - a.speculative.gamma - 1;
  if (keep < 2) throw Error("bench edge-cloud: max-new-tokens leaves no room for a prompt in the context of " + std::to_string(context));
  return encode_prompts(texts, tok, keep);
}

Request edge_cloud_request(const EdgeBenchArgs& a) {
  Request req;
  req.max_new_tokens = a.max_new_tokens;
  req.ignore_eos = true;  // every generation has n tokens, as in the latency model
  static_cast<SpeculativeParams&>(req) = a.speculative;
  req.deadline = std::chrono::minutes(10);
  return req;
}

nlohmann::json edge_cloud_row(const EdgeBenchArgs& a, const std::vector<std::vector<int32_t>>& prompts,
                              const Request& req, double delay) {
  NetemOptions n;
  n.upstream = a.server;
  n.delay_ms = delay;
  n.jitter_ms = a.jitter_ms;
  n.jitter_distribution = a.jitter_distribution;
  n.loss = a.loss;
  n.rate_kbps = a.rate_kbps;
  NetemProxy proxy(n);
  proxy.start();
  const std::string address = "127.0.0.1:" + std::to_string(proxy.port());
  std::vector<ClientOptions> modes;
  for (const std::string& m : a.modes) modes.push_back(mode_options(m));
  auto is = [&](size_t m, Mode alias) { return mode_name(modes[m]) == mode_name(alias); };
  std::vector<std::unique_ptr<Client>> clients;
  for (const ClientOptions& m : modes) clients.push_back(connect_mode(m, a, address));
  // T_c: half the median round trip of an empty call through the link.
  std::vector<double> rtts;
  for (int i = 0; i < a.pings; ++i) rtts.push_back(clients[0]->ping_ms());
  const double tc = median(rtts) / 2.0;
  std::vector<ModeTotals> totals(modes.size());
  // Interleaved per prompt, in ABBA order (forward on even prompts,
  // backward on odd), so every mode sees the same machine noise and no
  // mode always runs right after another.
  std::vector<std::vector<Result>> results(modes.size());
  for (size_t i = 0; i < prompts.size(); ++i)
    for (size_t k = 0; k < modes.size(); ++k) {
      const size_t m = i % 2 == 0 ? k : modes.size() - 1 - k;
      results[m].push_back(clients[m]->generate_ids(prompts[i], req));
    }
  for (size_t m = 0; m < modes.size(); ++m)
    for (const Result& r : results[m]) totals[m].add(r);
  // The fullest note: cloud-ar's has no drafting to emulate.
  std::string emulated;
  for (const ModeTotals& t : totals)
    if (const std::string note = emulation_note(t.sum); note.size() > emulated.size()) emulated = note;
  nlohmann::json row = {{"delay_ms", delay}, {"jitter_ms", a.jitter_ms}, {"jitter_distribution", a.jitter_distribution},
                        {"loss", a.loss}, {"T_c_ms", tc}};
  // T_p comes from edge-sd, which drafts every round on the main thread.
  double tp = 0;
  for (size_t m = 0; m < modes.size(); ++m)
    if (is(m, Mode::kEdgeSd) && totals[m].sum.draft_forwards)
      tp = totals[m].sum.draft_ms / static_cast<double>(totals[m].sum.draft_forwards);
  for (size_t m = 0; m < modes.size(); ++m) {
    const ModeTotals& t = totals[m];
    const Stats& s = t.sum;
    // Cost: the server's compute and the link's bytes per generated token
    // (cloud-ar's server time is its forwards; no drafts go up).
    nlohmann::json j = {{"ms_per_token", s.ms_per_token},
                        {"target_forwards_per_token", t.per_token(static_cast<double>(s.target_forwards))},
                        {"server_ms_per_token", t.per_token(s.server_ms > 0 ? s.server_ms : s.server_forward_ms)},
                        {"draft_bytes_per_token", t.per_token(static_cast<double>(s.draft_bytes))},
                        {"verdict_bytes_per_token", t.per_token(static_cast<double>(s.verdict_bytes))},
                        {"tokens", s.new_tokens},
                        {"prompts", t.prompts}};
    if (find_drafter(modes[m].drafter).has(kDraftsNothing)) {
      const double tq = s.server_forward_ms / static_cast<double>(std::max<int64_t>(s.target_forwards, 1));
      j["T_q_ms"] = tq;
      // Table 4: AR = 2 T_c + n T_q per generation.
      j["model_ms_per_token"] = t.per_token(2.0 * tc * static_cast<double>(t.prompts) + s.server_forward_ms);
    } else {
      const double tq = t.per_round(s.server_forward_ms);
      j["T_q_ms"] = tq;
      j["tau"] = s.tau;
      j["acceptance_rate"] = s.acceptance_rate;
      j["nodes_per_round"] = s.tree_nodes;
      j["network_rtt_ms"] = s.network_rtt_ms;
      // This mode's own drafting on the main thread (edge-fsd: misses only);
      // T_p above is edge-sd's.
      j["draft_ms_per_forward"] = s.draft_forwards ? s.draft_ms / static_cast<double>(s.draft_forwards) : 0.0;
      if (is(m, Mode::kEdgeSd)) {
        // Table 4: SD = (n / tau)(2 T_c + gamma T_p + T_q).
        j["model_ms_per_token"] = (2.0 * tc + a.speculative.gamma * tp + tq) / s.tau;
      } else if (!modes[m].predraft) {
        // Table 4's SD with this mode's own drafting per round (a tree's
        // is not gamma draft steps).
        j["model_ms_per_token"] = (2.0 * tc + t.per_round(s.draft_ms) + tq) / s.tau;
      } else {
        const double r = s.cache_miss_rate;
        const double tr = s.predraft_hits ? s.sync_wait_ms / static_cast<double>(s.predraft_hits) : 0.0;
        // Table 4: FSD = (n / tau)(2 T_c + r gamma T_p + (1 - r) T_r + T_q).
        j["model_ms_per_token"] = (2.0 * tc + r * a.speculative.gamma * tp + (1.0 - r) * tr + tq) / s.tau;
        j["cache_miss_rate"] = r;
        j["T_r_ms"] = tr;
        j["T_e_ms"] = t.per_round(s.server_exits_ms);
        j["avg_exit_layer"] = s.avg_exit_layer;
        j["hit_send_ms"] = s.hit_send_ms;
        j["miss_send_ms"] = s.miss_send_ms;
        j["predraft_round_share"] = t.per_round(static_cast<double>(s.predraft_rounds));
      }
    }
    row[a.modes[m]] = j;
  }
  row["T_p_ms"] = tp;
  row["emulated"] = emulated;
  // Each later mode against each earlier one, with a 95% interval from a
  // paired bootstrap over the prompts.
  nlohmann::json speedups = nlohmann::json::array();
  for (size_t i = 0; i < modes.size(); ++i)
    for (size_t k = i + 1; k < modes.size(); ++k) {
      const Interval ci = speedup_interval(totals[i].per_prompt, totals[k].per_prompt);
      speedups.push_back({{"from", a.modes[i]},
                          {"to", a.modes[k]},
                          {"speedup", speedup(totals[i].per_prompt, totals[k].per_prompt)},
                          {"ci95", {ci.lo, ci.hi}}});
    }
  row["speedups"] = speedups;
  return row;
}

namespace {

int run_bench_edge_cloud(EdgeBenchArgs a) {
  if (!a.link_profile.empty()) {
    NetemOptions n;
    apply_link_profile(a.link_profile, n);
    a.delays_ms = {n.delay_ms};
    a.jitter_ms = n.jitter_ms;
    a.jitter_distribution = n.jitter_distribution;
    a.loss = n.loss;
    a.rate_kbps = n.rate_kbps;
  }
  const std::vector<std::vector<int32_t>> prompts = edge_cloud_prompts(a);
  const Request req = edge_cloud_request(a);
  nlohmann::json rows = nlohmann::json::array();
  for (double delay : a.delays_ms) {
    rows.push_back(edge_cloud_row(a, prompts, req, delay));
    if (!a.json) std::fprintf(stderr, "delay %.0f ms done\n", delay);
  }

  if (a.json) {
    std::cout << nlohmann::json{{"gamma", a.speculative.gamma}, {"max_new_tokens", a.max_new_tokens}, {"rows", rows}}.dump(2) << std::endl;
    return 0;
  }
  if (!rows.empty() && !rows[0]["emulated"].get<std::string>().empty())
    std::printf("%s: every time below is emulated, not measured on real hardware of that speed\n\n",
                rows[0]["emulated"].get<std::string>().c_str());
  std::printf("%zu prompts x %d new tokens, gamma %d, %d pre-draft thread(s), %s queue; ms per generated token; "
              "model = Table 4 on the T_p, T_q, T_c (and r, T_r) measured in this run; speedups with a 95%% interval "
              "from a paired bootstrap over the prompts\n\n",
              prompts.size(), a.max_new_tokens, a.speculative.gamma, a.predraft_threads, a.predraft_queue.c_str());
  std::printf("| one-way delay | T_c | T_p | mode | T_q | nodes/round | tau | ms/token | model | gap | target fwd/token | "
              "server ms/token | up/down B/token | r | Avg EE | T_r | final->send hit/miss |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    for (const std::string& m : a.modes) {
      const auto& j = r[m];
      const double ms = j["ms_per_token"], model = j["model_ms_per_token"];
      std::printf("| %.0f ms | %.2f | %.3f | %s | %.2f | %s | %s | %.3f | %.3f | %+.1f%% | %.3f | %.3f | %.0f / %.0f | %s | %s | %s | %s |\n",
                  r["delay_ms"].get<double>(), r["T_c_ms"].get<double>(), r["T_p_ms"].get<double>(), m.c_str(),
                  j["T_q_ms"].get<double>(),
                  j.contains("nodes_per_round") ? std::to_string(j["nodes_per_round"].get<double>()).substr(0, 4).c_str() : "-",
                  j.contains("tau") ? std::to_string(j["tau"].get<double>()).substr(0, 4).c_str() : "-", ms,
                  model, 100.0 * (ms - model) / model, j["target_forwards_per_token"].get<double>(),
                  j["server_ms_per_token"].get<double>(), j["draft_bytes_per_token"].get<double>(),
                  j["verdict_bytes_per_token"].get<double>(),
                  j.contains("cache_miss_rate") ? std::to_string(j["cache_miss_rate"].get<double>()).substr(0, 5).c_str() : "-",
                  j.contains("avg_exit_layer") ? std::to_string(j["avg_exit_layer"].get<double>()).substr(0, 4).c_str() : "-",
                  j.contains("T_r_ms") ? std::to_string(j["T_r_ms"].get<double>()).substr(0, 5).c_str() : "-",
                  j.contains("hit_send_ms") ? (std::to_string(j["hit_send_ms"].get<double>()).substr(0, 5) + " / " +
                                               std::to_string(j["miss_send_ms"].get<double>()).substr(0, 5)).c_str()
                                            : "-");
    }
    std::string speeds;
    for (const auto& sp : r["speedups"]) {
      char text[160];
      std::snprintf(text, sizeof text, "%s->%s %.3fx (%.3f-%.3f)", sp["from"].get<std::string>().c_str(),
                    sp["to"].get<std::string>().c_str(), sp["speedup"].get<double>(), sp["ci95"][0].get<double>(),
                    sp["ci95"][1].get<double>());
      speeds += (speeds.empty() ? "" : "; ") + std::string(text);
    }
    std::printf("| %.0f ms | speedups | %s |\n", r["delay_ms"].get<double>(), speeds.c_str());
  }
  return 0;
}

}  // namespace

std::function<int()> add_bench_edge_cloud(CLI::App& bench) {
  auto a = std::make_shared<EdgeBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "edge-cloud",
      "Edge-cloud modes through a netem link at several delays, next to the early-exit edge-cloud paper's Table 4 "
      "latency model");
  cmd->add_option("--server", a->server, "splitspec-server HOST:PORT (the bench puts its own netem proxy in front)")->required();
  cmd->add_option("--draft", a->draft_dir, "Draft model directory (its tokenizer encodes the prompts)")->required();
  cmd->add_option("--prompts", a->prompts, "JSONL prompts (turns[0] or prompt), e.g. ../shared/prompts/spec_bench.jsonl")->required();
  cmd->add_option("--num-prompts", a->num_prompts, "Prompts to use, from the top")->capture_default_str();
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "Tokens per generation (EOS ignored)")->capture_default_str();
  add_speculative_flags(cmd, a->speculative);
  cmd->add_option("--delays-ms", a->delays_ms, "One-way delays to emulate")->delimiter(',')->capture_default_str();
  cmd->add_option("--jitter-ms", a->jitter_ms, "Jitter of the emulated link")->capture_default_str();
  cmd->add_option("--jitter-distribution", a->jitter_distribution, "uniform, normal or pareto (splitspec netem)")
      ->capture_default_str()
      ->check(CLI::IsMember(jitter_distributions()));
  cmd->add_option("--loss", a->loss, "Packet loss of the emulated link (a retransmission timeout late)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--rate-kbps", a->rate_kbps, "Bandwidth of the emulated link; 0 is unlimited")->capture_default_str();
  cmd->add_option("--link-profile", a->link_profile,
                  "A named link instead of --delays-ms, --jitter-ms, --loss and --rate-kbps: " + link_profile_names())
      ->check(CLI::IsMember(link_profiles()));
  cmd->add_option("--threads", a->threads, "Compute threads of the draft; default (0): OMP_NUM_THREADS if set, else the physical cores")->capture_default_str();
  cmd->add_option("--modes", a->modes,
                  "Modes to compare, interleaved per prompt: aliases (cloud-ar, edge-sd, edge-fsd) or "
                  "server+DRAFTER[+predraft], e.g. server+model-tree, each optionally with /KEY=VALUE drafter options, "
                  "e.g. server+mtp/width=3")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--predraft-threads", a->predraft_threads, "Pre-drafting modes: worker threads")->capture_default_str();
  cmd->add_option("--predraft-queue", a->predraft_queue, "Pre-drafting modes: priority, fifo or random")->capture_default_str();
  cmd->add_flag("--predraft-adaptive", a->predraft_adaptive, "Pre-drafting modes: only while it measurably pays");
  cmd->add_option("--tree-nodes", a->tree.tree_nodes, "Tree modes without fallback: nodes per tree")->capture_default_str();
  cmd->add_option("--max-tree-nodes", a->tree.max_tree_nodes, "Tree modes: most nodes per tree (the server's max_draft_tokens caps it)")
      ->capture_default_str();
  cmd->add_option("--max-children", a->tree.max_children, "Tree modes: greedy alternatives per node")->capture_default_str();
  cmd->add_option("--draft-width", a->tree.draft_width, "Tree modes: nodes drafted together in one draft forward")
      ->capture_default_str();
  cmd->add_option("--alpha", a->tree.initial_alpha, "Tree modes: initial fallback threshold")->capture_default_str();
  cmd->add_flag("--no-fallback", a->no_fallback, "Tree modes: trees of --tree-nodes, no fallback");
  cmd->add_option("--emulate-draft-factor", a->emulate_draft_factor,
                  "Emulate a slower edge device: drafting takes this many times its measured time (1: real)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1000.0));
  cmd->add_flag("--json", a->json, "Print the rows as JSON");
  return [a]() { return run_bench_edge_cloud(*a); };
}

}  // namespace splitspec::cli

// `splitspec bench regimes`: where each mode wins. Sweeps the server's
// accelerator (T_q, emulated with --emulate-forward-ms), the link's one-way
// delay and the edge device's speed (--emulate-draft-factor), runs every
// mode in every cell through `bench edge-cloud`'s measurement, and prints,
// and draws as an SVG heat map, which mode wins each cell and by how much
// against cloud-ar, as the early-exit edge-cloud paper's Fig. 6 does for
// FSD. Beside each measurement: the measured tau, r and T_r and Table 4's
// prediction. Every figure is labelled emulated.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/commands/bench_edge_cloud.h"
#include "bench/commands/bench_commands.h"
#include "bench/commands/server_process.h"
#include "client/cli/speculative_flags.h"
#include "client/cli/svg_plot.h"
#include "common/util/error.h"

namespace splitspec::cli {

namespace {

namespace fs = std::filesystem;

struct RegimeArgs {
  EdgeBenchArgs edge;
  std::string target_dir;
  std::string server_bin;  // default: splitspec-server beside this binary
  std::vector<double> forward_ms = {5, 15, 30, 60};
  double per_row_ms = 0.3;
  std::vector<double> draft_factors = {1, 40};
  int server_threads = 1;
  std::string svg;
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// The fastest mode of a cell and its speedup over cloud-ar with its 95%
// interval (0 without cloud-ar; 1 and no interval when cloud-ar wins).
struct Winner {
  size_t mode = 0;
  double speedup = 0;
  double lo = 0, hi = 0;
  std::string text(const std::vector<std::string>& modes) const {
    char buf[96];
    if (lo > 0)
      std::snprintf(buf, sizeof buf, "%s %.2fx (%.2f-%.2f)", modes[mode].c_str(), speedup, lo, hi);
    else
      std::snprintf(buf, sizeof buf, "%s %.2fx", modes[mode].c_str(), speedup);
    return buf;
  }
};

Winner winner_of(const nlohmann::json& row, const std::vector<std::string>& modes) {
  Winner w;
  for (size_t m = 1; m < modes.size(); ++m)
    if (row[modes[m]]["ms_per_token"].get<double>() < row[modes[w.mode]]["ms_per_token"].get<double>()) w.mode = m;
  for (size_t m = 0; m < modes.size(); ++m)
    if (modes[m] == "cloud-ar")
      w.speedup = row[modes[m]]["ms_per_token"].get<double>() / row[modes[w.mode]]["ms_per_token"].get<double>();
  for (const auto& s : row["speedups"])
    if (s["from"] == "cloud-ar" && s["to"] == modes[w.mode]) {
      w.speedup = s["speedup"].get<double>();
      w.lo = s["ci95"][0].get<double>();
      w.hi = s["ci95"][1].get<double>();
    }
  return w;
}

int run_bench_regimes(RegimeArgs a) {
  a.server_bin = find_server_bin(a.server_bin, "bench regimes");
  const std::vector<std::string>& modes = a.edge.modes;
  if (std::find(modes.begin(), modes.end(), "cloud-ar") == modes.end())
    throw Error("bench regimes: --modes must include cloud-ar, the base of every cell's speedup");
  const std::string dir = fs::temp_directory_path() / ("splitspec-regimes-" + std::to_string(getpid()));
  fs::create_directories(dir);
  nlohmann::json cells = nlohmann::json::array();
  std::vector<std::vector<int32_t>> prompts;
  const Request req = edge_cloud_request(a.edge);
  for (double tq : a.forward_ms) {
    const std::string emulation = fmt("%g", tq) + ":" + fmt("%g", a.per_row_ms);
    ServerProcess server(a.server_bin,
                         {"--target", a.target_dir, "--threads", std::to_string(a.server_threads), "--emulate-forward-ms",
                          emulation},
                         dir, "bench regimes");
    EdgeBenchArgs e = a.edge;
    e.server = server.address();
    if (prompts.empty()) prompts = edge_cloud_prompts(e);
    for (double factor : a.draft_factors) {
      e.emulate_draft_factor = factor;
      for (double delay : a.edge.delays_ms) {
        nlohmann::json row = edge_cloud_row(e, prompts, req, delay);
        row["emulate_forward_ms"] = emulation;
        row["emulate_draft_factor"] = factor;
        cells.push_back(row);
        std::fprintf(stderr, "T_q %s ms, draft x%g, delay %g ms done\n", emulation.c_str(), factor, delay);
      }
    }
  }
  fs::remove_all(dir);

  const std::string note = "EMULATED: server forwards FIXED:" + fmt("%g", a.per_row_ms) +
                           " ms per row (--emulate-forward-ms), drafting at the factor shown (--emulate-draft-factor); "
                           "links by the netem proxy; tokens and acceptance are real";
  // The cell of one draft factor and emulated T_q at each delay, in order.
  auto row_of = [&](double factor, double tq) {
    const std::string emulation = fmt("%g", tq) + ":" + fmt("%g", a.per_row_ms);
    std::vector<const nlohmann::json*> row;
    for (const auto& c : cells)
      if (c["emulate_draft_factor"].get<double>() == factor && c["emulate_forward_ms"].get<std::string>() == emulation)
        row.push_back(&c);
    return row;
  };
  if (a.edge.json) {
    std::cout << nlohmann::json{{"note", note}, {"gamma", a.edge.speculative.gamma}, {"max_new_tokens", a.edge.max_new_tokens},
                                {"prompts", prompts.size()}, {"cells", cells}}
                     .dump(2)
              << std::endl;
  } else {
    std::printf("%s\n\n%zu prompts x %d new tokens, gamma %d; per cell the fastest mode and its speedup over cloud-ar "
                "(ms/token over ms/token; 95%% interval from a paired bootstrap over the prompts)\n",
                note.c_str(), prompts.size(), a.edge.max_new_tokens, a.edge.speculative.gamma);
    for (double factor : a.draft_factors) {
      std::printf("\n### drafting x%g\n\n| T_q (emulated) |", factor);
      for (double d : a.edge.delays_ms) std::printf(" %g ms one-way |", d);
      std::printf("\n|---|");
      for (size_t i = 0; i < a.edge.delays_ms.size(); ++i) std::printf("---|");
      std::printf("\n");
      for (double tq : a.forward_ms) {
        std::printf("| %g ms |", tq);
        for (const nlohmann::json* c : row_of(factor, tq)) std::printf(" %s |", winner_of(*c, modes).text(modes).c_str());
        std::printf("\n");
      }
    }
    std::printf("\n| T_q | draft x | delay | mode | ms/token | Table 4 | tau | r | T_r | T_p | T_c | server ms/token |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& c : cells)
      for (const std::string& m : modes) {
        const auto& j = c[m];
        auto opt = [&](const char* key, const char* f) { return j.contains(key) ? fmt(f, j[key].get<double>()) : "-"; };
        std::printf("| %s | %g | %g ms | %s | %.2f | %.2f | %s | %s | %s | %.2f | %.2f | %.2f |\n",
                    c["emulate_forward_ms"].get<std::string>().c_str(), c["emulate_draft_factor"].get<double>(),
                    c["delay_ms"].get<double>(), m.c_str(), j["ms_per_token"].get<double>(),
                    j["model_ms_per_token"].get<double>(), opt("tau", "%.2f").c_str(),
                    opt("cache_miss_rate", "%.2f").c_str(), opt("T_r_ms", "%.2f").c_str(), c["T_p_ms"].get<double>(),
                    c["T_c_ms"].get<double>(), j["server_ms_per_token"].get<double>());
      }
  }

  if (!a.svg.empty()) {
    std::vector<HeatPanel> panels;
    for (double factor : a.draft_factors) {
      HeatPanel p;
      p.title = "drafting x" + fmt("%g", factor);
      p.row_label = "T_q (emulated)";
      p.column_label = "one-way delay";
      for (double d : a.edge.delays_ms) p.columns.push_back(fmt("%g ms", d));
      for (double tq : a.forward_ms) {
        p.rows.push_back(fmt("%g ms", tq));
        std::vector<HeatCell> row;
        for (const nlohmann::json* c : row_of(factor, tq)) {
          const Winner w = winner_of(*c, modes);
          row.push_back({static_cast<int>(w.mode), modes[w.mode], fmt("%.2fx", w.speedup)});
        }
        p.cells.push_back(row);
      }
      panels.push_back(p);
    }
    write_heat_map_svg(a.svg, "Fastest mode and its speedup over cloud-ar (emulated regimes)", modes, panels, note);
  }
  return 0;
}

}  // namespace

std::function<int()> add_bench_regimes(CLI::App& bench) {
  auto a = std::make_shared<RegimeArgs>();
  a->edge.delays_ms = {0, 10, 40, 80};
  a->edge.num_prompts = 6;
  a->edge.max_new_tokens = 32;
  a->edge.pings = 5;
  a->edge.modes = {"cloud-ar", "edge-sd", "edge-fsd", "server+model-tree", "server+pld"};
  a->edge.threads = 1;
  CLI::App* cmd = bench.add_subcommand(
      "regimes",
      "Where each mode wins: an emulated server accelerator (T_q) x one-way delay x edge-device speed, a server "
      "process per T_q; the fastest mode per cell, printed and drawn as an SVG heat map");
  cmd->add_option("--target", a->target_dir, "The server's target model directory")->required();
  cmd->add_option("--draft", a->edge.draft_dir, "Draft model directory (its tokenizer encodes the prompts)")->required();
  cmd->add_option("--prompts", a->edge.prompts, "JSONL prompts, e.g. ../shared/prompts/spec_bench.jsonl")->required();
  cmd->add_option("--server-bin", a->server_bin, "splitspec-server binary (default: beside this one)");
  cmd->add_option("--forward-ms", a->forward_ms, "Emulated forward times (FIXED of --emulate-forward-ms), one server each")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10000.0));
  cmd->add_option("--per-row-ms", a->per_row_ms, "Emulated time per row of a forward (PER_ROW)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10000.0));
  cmd->add_option("--delays-ms", a->edge.delays_ms, "One-way delays")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--draft-factors", a->draft_factors, "Emulated edge-device slowdowns (--emulate-draft-factor)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1000.0));
  cmd->add_option("--modes", a->edge.modes, "Modes, interleaved per prompt (cloud-ar first: the speedups' base)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--num-prompts", a->edge.num_prompts, "Prompts per cell, from the top")->capture_default_str();
  cmd->add_option("--max-new-tokens", a->edge.max_new_tokens, "Tokens per generation (EOS ignored)")->capture_default_str();
  add_speculative_flags(cmd, a->edge.speculative);
  cmd->add_option("--jitter-ms", a->edge.jitter_ms, "Jitter of the emulated link")->capture_default_str();
  cmd->add_option("--threads", a->edge.threads, "Compute threads of the draft")->capture_default_str();
  cmd->add_option("--server-threads", a->server_threads, "Compute threads of each server")->capture_default_str();
  cmd->add_option("--svg", a->svg, "Write the heat map here");
  cmd->add_flag("--json", a->edge.json, "Print the cells as JSON");
  return [a]() { return run_bench_regimes(*a); };
}

}  // namespace splitspec::cli

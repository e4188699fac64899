#pragma once
// The measurement behind `bench edge-cloud` and `bench regimes`: modes
// through a netem link in front of a server, interleaved per prompt, with the
// early-exit edge-cloud paper's Table 4 model on the times measured in the
// same run.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/client.h"
#include "common/drafting/tree_options.h"

namespace splitspec::cli {

struct EdgeBenchArgs {
  std::string server;
  std::string draft_dir;
  std::string prompts;
  int32_t num_prompts = 40;
  int32_t max_new_tokens = 128;
  SpeculativeParams speculative;  // --gamma
  // Tree modes.
  TreeOptions tree;  // the tree modes' flags
  bool no_fallback = false;
  std::vector<double> delays_ms = {0, 2, 10, 50};
  double jitter_ms = 0;
  std::string jitter_distribution = "uniform";
  double loss = 0;
  double rate_kbps = 0;
  std::string link_profile;  // a named link (netem_proxy.h): its delay replaces delays_ms
  int32_t pings = 21;
  int threads = 0;  // default_threads()
  std::vector<std::string> modes = {"cloud-ar", "edge-sd", "edge-fsd"};
  int predraft_threads = 1;
  std::string predraft_queue = "priority";
  bool predraft_adaptive = false;
  double emulate_draft_factor = 1;
  bool json = false;
};

// The prompts, encoded by the draft's tokenizer and cut to what the server's
// context leaves room for.
std::vector<std::vector<int32_t>> edge_cloud_prompts(const EdgeBenchArgs& a);
// Fixed-length greedy generations at a.speculative.gamma, as the latency model assumes.
Request edge_cloud_request(const EdgeBenchArgs& a);
// Every mode of `a` over `prompts` through a fresh netem proxy (one-way
// `delay_ms`) in front of a.server: per mode its ms/token, cost, tau, r,
// T_r and Table 4's prediction; T_c, T_p, the emulation note and the
// speedups with their intervals.
nlohmann::json edge_cloud_row(const EdgeBenchArgs& a, const std::vector<std::vector<int32_t>>& prompts,
                              const Request& req, double delay_ms);

}  // namespace splitspec::cli

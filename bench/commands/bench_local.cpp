// `splitspec bench local`: EdgeLLM's evaluation on this machine. The target
// streams from disk under a memory budget (O_DIRECT, so the page cache holds
// none of it) and every configuration runs each prompt in turn, interleaved,
// so that the disk's drift hits them all alike: Std, StdPL, local-sd, then
// the token tree alone, with the fallback, and with provisional generation.
#include <charconv>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/commands/bench_commands.h"
#include "client/cli/prompts.h"
#include "bench/commands/row_spec.h"
#include "client/client.h"
#include "common/drafting/tree_options.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/error.h"
#include "client/cli/speculative_flags.h"

namespace splitspec::cli {

namespace {

struct LocalBenchArgs {
  std::string target_dir, draft_dir, prompts;
  int32_t num_prompts = 40;
  int32_t max_new_tokens = 128;
  std::vector<std::string> budgets = {"10%", "25%", "50%"};
  std::vector<std::string> configs = {"std", "stdpl", "local-sd", "tree", "tree+fallback", "tree+fallback+provisional"};
  SpeculativeParams speculative;  // --gamma
  TreeOptions tree;  // the tree configurations' flags
  std::string read_ahead;
  int threads = 0;  // default_threads()
  bool json = false;
};

// A configuration is a name with optional per-row settings, e.g.
// "tree/nodes=8/width=1": the paper's decoder (one node per draft forward)
// beside ours in the same interleaved run. Applies the settings to `o` and
// returns the name.
std::string apply_row_settings(const std::string& spec, TreeOptions& t) {
  const RowSpec row = parse_row_spec(spec);
  for (const RowSetting& setting : row.settings) {
    int value = 0;
    const char* last = setting.value.data() + setting.value.size();
    if (setting.has_value && std::from_chars(setting.value.data(), last, value).ptr != last) value = 0;
    if (value < 1 || (setting.key != "nodes" && setting.key != "width") || row.name.rfind("tree", 0) != 0)
      throw Error("bench local: bad setting '" + setting.text + "' in configuration '" + spec +
                  "' (tree configurations only: nodes=N sets tree nodes and most tree nodes, width=W nodes per draft "
                  "forward; N, W >= 1)");
    if (setting.key == "nodes")
      t.tree_nodes = t.max_tree_nodes = value;
    else
      t.draft_width = value;
  }
  return row.name;
}

// A configuration's client; `tree` gets its tree settings (model-tree's
// drafter options).
ClientOptions options_for(const LocalBenchArgs& a, const std::string& spec, const std::string& budget,
                          TreeOptions* tree = nullptr) {
  ClientOptions o;
  o.target_dir = a.target_dir;
  o.draft_dir = a.draft_dir;
  o.memory_budget = budget;
  o.stream_read_ahead = a.read_ahead;
  o.threads = a.threads;
  TreeOptions t = a.tree;
  const std::string config = apply_row_settings(spec, t);
  if (config == "std" || config == "stdpl") {
    o = with_mode(o, Mode::kLocalAr);
    o.stream_pipeline = config == "stdpl";
  } else if (config == "local-sd") {
    o = with_mode(o, Mode::kLocalSd);
  } else if (config == "tree" || config == "tree+fallback" || config == "tree+provisional" ||
             config == "tree+fallback+provisional") {
    o = with_mode(o, Mode::kLocalTree);
    t.fallback = config.find("fallback") != std::string::npos;
    t.provisional = config.find("provisional") != std::string::npos;
    o.drafter_options = t.options();
  } else {
    throw Error("bench local: unknown configuration '" + spec +
                "' (std, stdpl, local-sd, tree, tree+fallback, tree+provisional, tree+fallback+provisional)");
  }
  if (tree) *tree = t;
  return o;
}

int run_bench_local(const LocalBenchArgs& a) {
  const std::vector<std::string> texts = read_prompts(a.prompts, a.num_prompts);
  Tokenizer tok(a.target_dir);
  const ModelConfig target_config = load_model_config(a.target_dir);
  int64_t largest_round = a.speculative.gamma;
  for (const std::string& c : a.configs) {
    TreeOptions t;
    options_for(a, c, "", &t);
    largest_round = std::max<int64_t>(largest_round, std::max(t.tree_nodes, t.max_tree_nodes));
  }
  const int64_t keep = target_config.max_position_embeddings - a.max_new_tokens - largest_round - 1;
  if (keep < 2) throw Error("bench local: max-new-tokens leaves no room for a prompt in the target's context");
  const std::vector<std::vector<int32_t>> prompts = encode_prompts(texts, tok, keep);
  const uint64_t weights = stored_weight_bytes(a.target_dir);
  Request req;
  req.max_new_tokens = a.max_new_tokens;
  req.ignore_eos = true;
  static_cast<SpeculativeParams&>(req) = a.speculative;
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& budget : a.budgets) {
    const uint64_t bytes = parse_bytes(budget, weights);
    std::vector<std::unique_ptr<Client>> clients;
    for (const std::string& c : a.configs) clients.push_back(Client::connect(options_for(a, c, budget)));
    std::vector<Stats> totals(a.configs.size());
    for (size_t p = 0; p < prompts.size(); ++p) {
      for (size_t c = 0; c < clients.size(); ++c) totals[c] += clients[c]->generate_ids(prompts[p], req).stats;
      std::fprintf(stderr, "\rbudget %s: prompt %zu/%zu", budget.c_str(), p + 1, prompts.size());
    }
    std::fprintf(stderr, "\n");
    const double std_ms = totals[0].ms_per_token;
    if (!a.json) {
      std::printf("\nbudget %s = %.2f MB of the target's %.2f MB of weights as stored; %zu prompts x %d tokens; ms per token\n\n",
                  budget.c_str(), bytes / 1e6, weights / 1e6, prompts.size(), a.max_new_tokens);
      std::printf("| configuration | ms/token | speedup vs %s | verifications/token | accepted/verification | "
                  "tree nodes | provisional kept/drafted | target ms/forward | of which compute | weight stall ms/token | "
                  "MB read/token | peak weight MB |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
                  a.configs[0].c_str());
    }
    for (size_t c = 0; c < clients.size(); ++c) {
      const Stats& t = totals[c];
      const double ms = t.ms_per_token;
      const auto per_token = [&t](double v) { return t.new_tokens ? v / static_cast<double>(t.new_tokens) : 0.0; };
      const double forwards = static_cast<double>(t.target_forwards);
      const double target_ms_per_forward = forwards > 0 ? t.target_ms / forwards : 0.0;
      // A verification's own compute: its forward less the time it waited
      // for weights. Provisional drafting must not raise it.
      const double compute_ms_per_forward =
          forwards > 0 && t.target_ms > 0 ? (t.target_ms - t.weight_stall_ms) / forwards : 0.0;
      nlohmann::json j = {{"budget", budget},
                          {"budget_bytes", bytes},
                          {"configuration", a.configs[c]},
                          {"ms_per_token", ms},
                          {"speedup", ms > 0 ? std_ms / ms : 0.0},
                          {"verifications_per_token", per_token(forwards)},
                          {"accepted_per_verification", t.accepted_per_round},
                          {"tree_nodes", t.tree_nodes},
                          {"provisional_tokens", t.provisional_tokens},
                          {"provisional_kept", t.provisional_kept},
                          {"target_ms_per_forward", target_ms_per_forward},
                          {"compute_ms_per_forward", compute_ms_per_forward},
                          {"stall_ms_per_token", per_token(t.weight_stall_ms)},
                          {"mb_read_per_token", per_token(static_cast<double>(t.weight_bytes_read)) / 1e6},
                          {"peak_weight_bytes", t.weight_memory_peak}};
      all.push_back(j);
      if (!a.json)
        std::printf("| %s | %.2f | %.2fx | %.3f | %.2f | %.1f | %lld/%lld | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                    a.configs[c].c_str(), ms, ms > 0 ? std_ms / ms : 0.0, per_token(forwards), t.accepted_per_round,
                    t.tree_nodes, static_cast<long long>(t.provisional_kept),
                    static_cast<long long>(t.provisional_tokens), target_ms_per_forward, compute_ms_per_forward,
                    per_token(t.weight_stall_ms), per_token(static_cast<double>(t.weight_bytes_read)) / 1e6,
                    t.weight_memory_peak / 1e6);
    }
    std::fflush(stdout);
  }
  if (a.json) std::cout << all.dump(1) << std::endl;
  return 0;
}

}  // namespace

std::function<int()> add_bench_local(CLI::App& bench) {
  auto a = std::make_shared<LocalBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "local", "Local mode under a memory budget: Std, StdPL, local-sd and local-tree (tree, +fallback, +provisional)");
  cmd->add_option("--target,--model", a->target_dir, "Target model directory (streamed from disk)")->required();
  cmd->add_option("--draft", a->draft_dir, "Draft model directory")->required();
  cmd->add_option("--prompts", a->prompts, "JSONL prompts (turns[0] or prompt), e.g. ../shared/prompts/spec_bench.jsonl")
      ->required();
  cmd->add_option("--num-prompts", a->num_prompts, "Prompts to use, from the top")->capture_default_str();
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "Tokens per prompt (EOS ignored)")->capture_default_str();
  cmd->add_option("--budgets", a->budgets, "Memory budgets for the target's weights (25%, 8MiB, ...)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--configs", a->configs,
                  "Configurations, the first being the baseline of the speedups; a tree configuration may add "
                  "/nodes=N and /width=W, e.g. tree/nodes=8/width=1")
      ->delimiter(',')
      ->capture_default_str();
  add_speculative_flags(cmd, a->speculative);
  cmd->add_option("--tree-nodes", a->tree.tree_nodes, "tree without fallback: nodes per tree")->capture_default_str();
  cmd->add_option("--max-tree-nodes", a->tree.max_tree_nodes, "tree with fallback: most nodes per tree")->capture_default_str();
  cmd->add_option("--max-children", a->tree.max_children, "tree: greedy alternatives per node")->capture_default_str();
  cmd->add_option("--draft-width", a->tree.draft_width, "tree: nodes drafted together in one draft forward")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--alpha", a->tree.initial_alpha, "tree with fallback: initial alpha")->capture_default_str();
  cmd->add_option("--max-provisional", a->tree.max_provisional, "provisional tokens per verification at most")
      ->capture_default_str();
  cmd->add_option("--read-ahead", a->read_ahead,
                  "pipelined configurations: file bytes the loader may read ahead (2MiB, 8%); default two layers as "
                  "stored, or what the budget has left");
  cmd->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores")->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON array of rows instead of tables");
  return [a]() { return run_bench_local(*a); };
}

}  // namespace splitspec::cli

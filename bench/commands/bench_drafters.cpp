// `splitspec bench drafters`: every drafter against plain decoding on the
// same prompts, by Spec-Bench category, as DIAA's Tables 1-2 report them:
// mean accepted tokens per verification including the bonus token (MAT), ms
// per token and the speedup over plain decoding in the same run, and drafting
// ms per round. Each prompt runs through every drafter in turn (the order
// rotating from prompt to prompt), so drift of the machine hits them alike.
// Where: in memory, streamed under a memory budget, or through the netem
// proxy to a server at each one-way delay.
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/commands/bench_commands.h"
#include "client/cli/netem_proxy.h"
#include "client/cli/prompts.h"
#include "bench/commands/row_spec.h"
#include "bench/commands/speedup_interval.h"
#include "client/client.h"
#include "common/drafting/registry.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/error.h"
#include "client/cli/speculative_flags.h"

namespace splitspec::cli {

namespace {

struct DrafterBenchArgs {
  std::string target_dir, draft_dir, lut, prompts, budget, server;
  std::vector<double> delays_ms = {0, 10};
  int32_t per_category = 5;
  int32_t max_new_tokens = 128;
  SpeculativeParams speculative;  // --gamma
  std::vector<std::string> drafters = {"none", "model", "model-tree", "lut", "lut-static", "pld"};
  int threads = 0;  // default_threads()
  bool json = false;
};

// Spec-Bench's six tasks; its MT-bench questions (writing, coding, ...) are
// the multi-turn task.
std::string task_of(const std::string& category) {
  static const std::map<std::string, std::string> tasks = {{"summarization", "Sum"}, {"math_reasoning", "Math"},
                                                           {"qa", "QA"},           {"rag", "RAG"},
                                                           {"translation", "Trans"}};
  auto it = tasks.find(category);
  return it == tasks.end() ? "MT" : it->second;
}

// "lut-static/budget=24": drafter lut with tree=static and budget=24.
ClientOptions options_for(const DrafterBenchArgs& a, const std::string& spec) {
  ClientOptions o;
  const RowSpec row = parse_row_spec(spec);
  o.drafter = row.name;
  if (row.name == "lut-static") {
    o.drafter = "lut";
    o.drafter_options["tree"] = "static";
  }
  for (const RowSetting& setting : row.settings) {
    if (setting.text == "predraft") {
      o.predraft = true;  // server rows: pre-draft on the early exits' verdicts
      continue;
    }
    if (!setting.has_value || setting.key.empty())
      throw Error("bench drafters: '" + setting.text + "' in '" + spec +
                  "' is neither predraft nor a drafter option KEY=VALUE ('/' separates them, so a file there is named "
                  "from the working directory, without '/')");
    o.drafter_options[setting.key] = setting.value;
  }
  if (o.drafter == "lut" && !a.lut.empty() && !o.drafter_options.count("tables")) o.drafter_options["tables"] = a.lut;
  const DrafterInfo info = find_drafter(o.drafter);
  if (info.has(kNeedsDraftModel)) o.draft_dir = a.draft_dir;
  o.threads = a.threads;
  return o;
}

struct Row {
  std::vector<PromptCost> costs;  // per prompt, in order
  Stats sum;
};

nlohmann::json run_setting(const DrafterBenchArgs& a, const std::string& where, const std::string& address,
                           const std::vector<std::vector<int32_t>>& prompts, const std::vector<std::string>& tasks) {
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<double> model_bytes;
  for (const std::string& d : a.drafters) {
    ClientOptions o = options_for(a, d);
    if (address.empty()) {
      o.verifier = VerifierKind::kLocal;
      o.target_dir = a.target_dir;
      o.memory_budget = a.budget;
      // Streamed, the baseline is EdgeLLM's Std: each matrix read when the
      // forward reaches it. The drafters run with the read-ahead pipeline.
      if (!a.budget.empty() && clients.empty()) o.stream_pipeline = false;
    } else {
      o.verifier = VerifierKind::kServer;
      o.server = address;
      // Without a draft model beside it, the client finds the tokenizer with the target.
      if (!find_drafter(o.drafter).has(kNeedsDraftModel)) o.tokenizer = a.target_dir;
    }
    clients.push_back(Client::connect(o));
    // The weights drafting reads on this device: a draft model's (fp32 in
    // memory) here, the recurrent head's (half) from its counters.
    model_bytes.push_back(o.draft_dir.empty() ? 0.0 : static_cast<double>(stored_weight_bytes(o.draft_dir)));
  }
  Request req;
  req.max_new_tokens = a.max_new_tokens;
  req.ignore_eos = true;
  static_cast<SpeculativeParams&>(req) = a.speculative;
  const size_t n = a.drafters.size();
  std::map<std::string, std::vector<Row>> rows;  // task -> per drafter
  std::vector<Row> all(n);
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::vector<Row>& task = rows[tasks[p]];
    task.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t c = (p + i) % n;
      const Stats s = clients[c]->generate_ids(prompts[p], req).stats;
      for (Row* r : {&task[c], &all[c]}) {
        r->costs.push_back({s.wall_ms, static_cast<double>(s.new_tokens)});
        r->sum += s;
      }
    }
    std::fprintf(stderr, "\r%s: prompt %zu/%zu", where.c_str(), p + 1, prompts.size());
  }
  std::fprintf(stderr, "\n");
  rows["all"] = all;

  nlohmann::json out = nlohmann::json::array();
  if (!a.json)
    std::printf("\n%s; %zu prompts x %d tokens, greedy; speedup over %s in the same run (all: 95%% interval, paired "
                "bootstrap over prompts)\n\n| task | drafter | MAT | ms/token | speedup | draft ms/round | tree nodes |\n"
                "|---|---|---|---|---|---|---|\n",
                where.c_str(), prompts.size(), a.max_new_tokens, a.drafters[0].c_str());
  for (auto& [task, rs] : rows) {
    for (size_t c = 0; c < n; ++c) {
      const Stats& s = rs[c].sum;
      const double rounds = static_cast<double>(s.rounds);
      const auto per_round = [rounds](double v) { return rounds > 0 ? v / rounds : 0.0; };
      const auto counter = [&s](const char* name) {
        const auto it = s.drafter_counters.find(name);
        return it == s.drafter_counters.end() ? 0.0 : it->second;
      };
      // Tokens per verification, bonus included; plain decoding's is 1.
      const double mat = rounds > 0 ? s.accepted_per_round + 1.0 : 1.0;
      const double sp = speedup(rs[0].costs, rs[c].costs);
      // The weights drafting reads: the recurrent head's as it counts them,
      // else the draft model's.
      const double head = counter("recurrent_head_bytes");
      nlohmann::json j = {{"where", where},
                          {"task", task},
                          {"drafter", a.drafters[c]},
                          {"prompts", rs[c].costs.size()},
                          {"mat", mat},
                          {"ms_per_token", s.ms_per_token},
                          {"speedup", sp},
                          {"draft_ms_per_round", per_round(s.draft_ms)},
                          {"tree_nodes", s.tree_nodes},
                          {"drafter_memory_bytes", s.drafter_memory_bytes},
                          {"draft_weight_bytes", head > 0 ? head : model_bytes[c]},
                          {"top_k_bytes_per_round", per_round(static_cast<double>(s.verdict_top_k_bytes))},
                          {"hidden_bytes_per_round", per_round(static_cast<double>(s.verdict_hidden_bytes))},
                          {"verdict_bytes_per_round", per_round(static_cast<double>(s.verdict_bytes))},
                          {"lut_update_ms_per_round", per_round(counter("lut_update_ms"))},
                          {"lut_update_wait_ms_per_round", per_round(counter("lut_update_wait_ms"))},
                          {"wall_ms_per_round", per_round(s.wall_ms)}};
      std::string interval;
      if (task == "all" && c > 0 && rs[c].costs.size() > 1) {
        const Interval iv = speedup_interval(rs[0].costs, rs[c].costs);
        j["speedup_ci95"] = {iv.lo, iv.hi};
        char buf[64];
        std::snprintf(buf, sizeof buf, " (%.2f-%.2f)", iv.lo, iv.hi);
        interval = buf;
      }
      // ReDrafter's dynamic tree attention: verified nodes against the W x L
      // beam tokens they pack.
      if (counter("recurrent_beam_tokens") > 0)
        j["packed_share"] = counter("recurrent_tree_nodes") / counter("recurrent_beam_tokens");
      out.push_back(j);
      if (!a.json)
        std::printf("| %s | %s | %.2f | %.3f | %.2fx%s | %.3f | %.1f |\n", task.c_str(), a.drafters[c].c_str(), mat,
                    s.ms_per_token,
                    sp, interval.c_str(), j["draft_ms_per_round"].get<double>(), j["tree_nodes"].get<double>());
    }
  }
  if (!a.json)
    for (const nlohmann::json& j : out) {
      if (j["task"] != "all") continue;
      std::printf("\n%s: drafting weights %.2f MB, drafter state %.1f KB, verdict %.0f B/round (hidden state %.0f B, top-K %.0f B)",
                  j["drafter"].get<std::string>().c_str(), j["draft_weight_bytes"].get<double>() / 1e6,
                  j["drafter_memory_bytes"].get<double>() / 1e3, j["verdict_bytes_per_round"].get<double>(),
                  j["hidden_bytes_per_round"].get<double>(), j["top_k_bytes_per_round"].get<double>());
      if (j.contains("packed_share"))
        std::printf(", tree nodes %.1f%% of the beams' W x L tokens", 100 * j["packed_share"].get<double>());
    }
  if (!a.json) std::printf("\n");
  std::fflush(stdout);
  return out;
}

int run_bench_drafters(const DrafterBenchArgs& a) {
  if (a.drafters.empty()) throw Error("bench drafters: --drafters is empty");
  if (a.per_category < 1) throw Error("bench drafters: --per-category must be at least 1");
  const std::vector<PromptRecord> records = read_prompt_records(a.prompts, 0);
  std::map<std::string, int32_t> taken;
  std::vector<std::string> texts, tasks;
  for (const PromptRecord& r : records) {
    const std::string task = task_of(r.category);
    if (taken[task]++ >= a.per_category) continue;
    texts.push_back(r.text);
    tasks.push_back(task);
  }
  const ModelConfig config = load_model_config(a.target_dir);
  Tokenizer tok(a.target_dir);
  // Room for the generation and the largest tree a round may hold.
  const int64_t keep = config.max_position_embeddings - a.max_new_tokens - 65;
  if (keep < 2) throw Error("bench drafters: max-new-tokens leaves no room for a prompt in the target's context");
  const std::vector<std::vector<int32_t>> prompts = encode_prompts(texts, tok, keep);
  nlohmann::json all = nlohmann::json::array();
  auto add = [&](const nlohmann::json& rows) {
    for (const auto& r : rows) all.push_back(r);
  };
  if (a.server.empty()) {
    add(run_setting(a, a.budget.empty() ? "in memory" : "streamed, budget " + a.budget + " (baseline: Std)", "", prompts, tasks));
  } else {
    for (double delay : a.delays_ms) {
      NetemOptions n;
      n.upstream = a.server;
      n.delay_ms = delay;
      NetemProxy proxy(n);
      proxy.start();
      char where[64];
      std::snprintf(where, sizeof where, "server, %g ms one-way", delay);
      add(run_setting(a, where, "127.0.0.1:" + std::to_string(proxy.port()), prompts, tasks));
    }
  }
  if (a.json) std::cout << all.dump(1) << std::endl;
  return 0;
}

}  // namespace

std::function<int()> add_bench_drafters(CLI::App& bench) {
  auto a = std::make_shared<DrafterBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "drafters", "Every drafter against plain decoding by Spec-Bench task: MAT, ms/token, speedup, drafting ms/round");
  cmd->add_option("--target,--model", a->target_dir, "Target model directory (verified locally; its tokenizer encodes prompts)")
      ->required();
  cmd->add_option("--draft", a->draft_dir, "Draft model directory (model, model-tree)");
  cmd->add_option("--lut", a->lut, "Look-up tables for lut rows (default: they start empty)");
  cmd->add_option("--prompts", a->prompts, "Spec-Bench JSONL (category and turns), e.g. ../shared/prompts/spec_bench.jsonl")
      ->required();
  cmd->add_option("--per-category", a->per_category, "Prompts per task, from the top")->capture_default_str();
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "Tokens per prompt (EOS ignored)")->capture_default_str();
  cmd->add_option("--drafters", a->drafters,
                  "Rows, the first the baseline: drafter names, lut-static (lut with a static top-K tree), each "
                  "optionally with /KEY=VALUE drafter options and, on a server, /predraft, e.g. lut/budget=24 or "
                  "recurrent/width=4/length=4/predraft")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--budget", a->budget, "Stream the target under this memory budget (25%, 8MiB); default in memory");
  cmd->add_option("--server", a->server, "Verify on this splitspec-server instead, through a netem proxy per delay");
  cmd->add_option("--delays-ms", a->delays_ms, "With --server: one-way delays")->delimiter(',')->capture_default_str();
  add_speculative_flags(cmd, a->speculative);
  cmd->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores")->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON array of rows instead of tables");
  return [a]() { return run_bench_drafters(*a); };
}

}  // namespace splitspec::cli

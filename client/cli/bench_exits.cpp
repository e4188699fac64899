// `splitspec bench exits`: what early exits add to a verification forward.
// The forward of gamma+1 new tokens over a cache of `context` entries is
// timed plain and with exits verifying the draft at each chosen layer, both
// inline and beside the forward on a worker of their own (as the server runs
// them), rows interleaved so that machine noise hits all alike.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>

#include "client/cli/commands.h"
#include "common/early_exit_round.h"
#include "common/error.h"
#include "common/stopwatch.h"
#include "common/threads.h"

namespace splitspec::cli {

namespace {

struct ExitBenchArgs {
  std::string model_dir;
  std::vector<std::string> layer_sets = {"4", "3,5", "2,4,6", "all"};
  int32_t gamma = 4;
  int64_t context = 256;
  int32_t repeats = 200;
  int threads = 1;
  int64_t shortlist = 1024;
};

int run_bench_exits(const ExitBenchArgs& a) {
  set_compute_threads(a.threads);
  c10::InferenceMode guard;
  auto model = Model::load(a.model_dir);
  const ModelConfig& c = model->config();
  std::optional<EarlyExits> all = EarlyExits::load(a.model_dir, c);
  if (!all) throw Error(a.model_dir + ": no early_exits.json (train them with splitspec train exits)");
  all->set_shortlist(*model, a.shortlist);
  if (a.context + a.gamma + 1 > c.max_position_embeddings) throw Error("bench exits: context too long for the model");
  // A cache of real entries, then a chain draft to verify.
  KVCache base = model->new_cache();
  ForwardRequest pre;
  for (int64_t i = 0; i < a.context; ++i) pre.tokens.push_back(static_cast<int32_t>(3 + (i * 37) % (c.vocab_size - 3)));
  pre.logits_rows = std::vector<int64_t>{};
  model->forward(pre, base);
  DraftTree tree;
  for (int32_t i = 0; i < a.gamma; ++i) {
    tree.tokens.push_back(static_cast<int32_t>(5 + i * 11));
    tree.parents.push_back(i - 1);
  }
  ForwardRequest req;
  req.tokens.assign(1, 7);
  req.tokens.insert(req.tokens.end(), tree.tokens.begin(), tree.tokens.end());
  const at::Tensor rows_index = at::arange(0, a.gamma + 1, at::TensorOptions().dtype(at::kLong));
  SamplingParams greedy;

  struct Row {
    std::string layers;
    std::vector<int64_t> after;
    double inline_ms = 0, beside_ms = 0, worker_ms = 0;
  };
  std::vector<Row> rows{{"none", {}}};
  for (const std::string& spec : a.layer_sets) rows.push_back({spec, EarlyExits::parse_layers(spec, c)});
  for (const Row& r : rows)
    for (int64_t l : r.after)
      if (all->index_of(l) < 0) throw Error("bench exits: the model has no exit after layer " + std::to_string(l));
  ComputeQueue worker(1);
  KVCache cache = model->new_cache();
  auto timed_forward = [&](const std::vector<int64_t>& after, const std::function<void(int64_t, const at::Tensor&)>& tap) {
    cache.copy_prefix_from(base, a.context);
    ForwardRequest q = req;
    q.on_layer = [&](int64_t layer, const at::Tensor& hidden) {
      if (std::find(after.begin(), after.end(), layer + 1) != after.end()) tap(layer + 1, hidden.index_select(0, rows_index));
    };
    const auto t0 = SteadyClock::now();
    model->forward(q, cache);
    return ms_since(t0);
  };
  for (int32_t rep = 0; rep < a.repeats; ++rep) {
    for (Row& r : rows) {
      r.inline_ms += timed_forward(r.after, [&](int64_t after, const at::Tensor& x) {
        verify_at_exit(*model, *all, all->index_of(after), x, tree, greedy, Rng(1));
      });
      if (r.after.empty()) continue;
      const auto t0 = SteadyClock::now();
      ExitRound round(worker, *model, *all, tree, greedy, [](const EarlyVerdict&) {});
      timed_forward(r.after, [&](int64_t after, const at::Tensor& x) { round.tap(after, x, Rng(1)); });
      r.worker_ms += round.finish();
      r.beside_ms += ms_since(t0);
    }
  }
  std::printf("verification forward: %d new tokens over %lld cached, %d threads, mean of %d interleaved runs\n",
              a.gamma + 1, static_cast<long long>(a.context), a.threads, a.repeats);
  std::printf("inline: the forward's thread computes each exit; beside: a worker of its own does (as the server), and\n"
              "the forward waits only for one still running when it ends\n\n");
  std::printf("| exits after layers | inline ms | vs no exits | beside ms | vs no exits | exit worker ms |\n"
              "|---|---|---|---|---|---|\n");
  const double none = rows[0].inline_ms / a.repeats;
  auto pct = [&](double total) { return 100.0 * (total / a.repeats - none) / none; };
  for (const Row& r : rows) {
    if (r.after.empty()) {
      std::printf("| none | %.3f | +0.0%% | - | - | - |\n", none);
      continue;
    }
    std::printf("| %s | %.3f | %+.1f%% | %.3f | %+.1f%% | %.3f |\n", r.layers.c_str(), r.inline_ms / a.repeats,
                pct(r.inline_ms), r.beside_ms / a.repeats, pct(r.beside_ms), r.worker_ms / a.repeats);
  }
  return 0;
}

}  // namespace

std::function<int()> add_bench_exits(CLI::App& bench) {
  auto a = std::make_shared<ExitBenchArgs>();
  CLI::App* cmd = bench.add_subcommand("exits", "Cost of early exits on a verification forward");
  cmd->add_option("--model", a->model_dir, "Target directory with early_exits.json")->required();
  cmd->add_option("--layer-sets", a->layer_sets, "Exit layer sets to time, e.g. 4 3,5 all")->capture_default_str();
  cmd->add_option("--gamma", a->gamma, "Draft tokens verified")->capture_default_str();
  cmd->add_option("--context", a->context, "Cached tokens")->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "Interleaved runs per row")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Compute threads")->capture_default_str();
  cmd->add_option("--shortlist", a->shortlist, "Exits score the K most frequent tokens (0: all)")->capture_default_str();
  return [a]() { return run_bench_exits(*a); };
}

}  // namespace splitspec::cli

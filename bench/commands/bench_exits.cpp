// `splitspec bench exits`: what early exits add to a verification forward.
// The forward of gamma+1 new tokens over a cache of `context` entries is
// timed plain and with exits verifying the draft at each chosen layer, rows
// interleaved so that machine noise hits both alike.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "bench/commands/bench_commands.h"
#include "client/client.h"
#include "common/backend/cpu_backend.h"
#include "common/early_exit/early_verdict.h"
#include "common/kernels/threads.h"
#include "common/util/error.h"
#include "common/util/stopwatch.h"
#include "client/cli/speculative_flags.h"

namespace splitspec::cli {

namespace {

struct ExitBenchArgs {
  std::string model_dir;
  std::vector<std::string> layer_sets = {"4", "3,5", "2,4,6", "all"};
  SpeculativeParams speculative;  // --gamma
  int64_t context = 256;
  int32_t repeats = 200;
  int threads = 0;  // default_threads()
  int64_t shortlist = 1024;
};

int run_bench_exits(const ExitBenchArgs& a) {
  set_compute_threads(a.threads);
  auto model = Model::load(a.model_dir);
  const CpuBackend backend(*model);
  const ModelConfig& c = model->config();
  std::optional<EarlyExits> all = EarlyExits::load(a.model_dir, c);
  if (!all) throw Error(a.model_dir + ": no early_exits.json (train them with splitspec train exits)");
  all->set_shortlist(backend, a.shortlist);
  if (a.context + a.speculative.gamma + 1 > c.max_position_embeddings) throw Error("bench exits: context too long for the model");
  // A cache of real entries, then a chain draft to verify.
  KVCache base = model->new_cache();
  ForwardRequest pre;
  for (int64_t i = 0; i < a.context; ++i) pre.tokens.push_back(static_cast<int32_t>(3 + (i * 37) % (c.vocab_size - 3)));
  pre.logits_rows = std::vector<int64_t>{};
  model->forward(pre, base);
  DraftTree tree;
  for (int32_t i = 0; i < a.speculative.gamma; ++i) {
    tree.tokens.push_back(static_cast<int32_t>(5 + i * 11));
    tree.parents.push_back(i - 1);
  }
  ForwardRequest req;
  req.tokens.assign(1, 7);
  req.tokens.insert(req.tokens.end(), tree.tokens.begin(), tree.tokens.end());
  SamplingParams greedy;

  struct Row {
    std::string layers;
    std::vector<int64_t> after;
    double total_ms = 0;
  };
  std::vector<Row> rows{{"none", {}, 0}};
  for (const std::string& spec : a.layer_sets) rows.push_back({spec, EarlyExits::parse_layers(spec, c), 0});
  for (const Row& r : rows)
    for (int64_t l : r.after)
      if (all->index_of(l) < 0) throw Error("bench exits: the model has no exit after layer " + std::to_string(l));
  KVCache cache = model->new_cache();
  for (int32_t rep = 0; rep < a.repeats; ++rep) {
    for (Row& r : rows) {
      cache.copy_prefix_from(base, a.context);
      ForwardRequest q = req;
      if (!r.after.empty())
        q.on_layer = [&](int64_t layer, RowsView hidden) {
          const int idx = std::find(r.after.begin(), r.after.end(), layer + 1) != r.after.end() ? all->index_of(layer + 1) : -1;
          if (idx >= 0) verify_at_exit(backend, *all, idx, hidden.slice(0, a.speculative.gamma + 1), tree, greedy, Rng(1));
        };
      const auto t0 = SteadyClock::now();
      model->forward(q, cache);
      r.total_ms += ms_since(t0);
    }
  }
  std::printf("verification forward: %d new tokens over %lld cached, %d threads, mean of %d interleaved runs\n\n",
              a.speculative.gamma + 1, static_cast<long long>(a.context), a.threads, a.repeats);
  std::printf("| exits after layers | ms | vs no exits |\n|---|---|---|\n");
  const double none = rows[0].total_ms / a.repeats;
  for (const Row& r : rows)
    std::printf("| %s | %.3f | %+.1f%% |\n", r.layers.c_str(), r.total_ms / a.repeats, 100.0 * (r.total_ms / a.repeats - none) / none);
  return 0;
}

}  // namespace

std::function<int()> add_bench_exits(CLI::App& bench) {
  auto a = std::make_shared<ExitBenchArgs>();
  CLI::App* cmd = bench.add_subcommand("exits", "Cost of early exits on a verification forward");
  cmd->add_option("--target,--model", a->model_dir, "Target directory with early_exits.json")->required();
  cmd->add_option("--layer-sets", a->layer_sets, "Exit layer sets to time, e.g. 4 3,5 all")->capture_default_str();
  add_speculative_flags(cmd, a->speculative);
  cmd->add_option("--context", a->context, "Cached tokens")->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "Interleaved runs per row")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores")->capture_default_str();
  cmd->add_option("--shortlist", a->shortlist, "Exits score the K most frequent tokens (0: all)")->capture_default_str();
  return [a]() { return run_bench_exits(*a); };
}

}  // namespace splitspec::cli

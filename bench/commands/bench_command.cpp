#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "bench/commands/bench_commands.h"
#include "client/cli/commands.h"
#include "common/kernels/kernels.h"
#include "common/kernels/parallel.h"
#include "common/kernels/threads.h"
#include "common/model/model.h"
#include "common/model/streamed_weights.h"
#include "common/util/error.h"
#include "common/util/memory_usage.h"
#include "common/util/percentile.h"

namespace splitspec::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string model_dir;
  std::string random_config;
  std::vector<int64_t> contexts = {128, 1024};
  std::vector<int64_t> new_tokens = {1, 2, 4, 8, 16};
  double min_seconds = 0.5;
  // Untimed rounds first (allocators, caches), then at least min_samples timed.
  int warmup = 2;
  int min_samples = 5;
  bool last_logits = false;  // a prefill: only the last row's logits
  int threads = 0;
  std::string memory_budget;  // streamed from disk under it (e.g. "30%"), as generate's --memory-budget
  std::string dtype;  // convert the weights at load
  std::string kv_cache = "f32";
  bool json = false;
};

double elapsed_ms(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Read bandwidth of a buffer far larger than any cache, the roofline that a
// decode step (every weight read once) is held against. Best of several passes.
double measure_read_bandwidth_gbs() {
  const std::vector<uint8_t> buf(size_t{1} << 30, 0);  // 1 GiB, every page written before timing
  const int64_t n = static_cast<int64_t>(buf.size());
  double best_ms = 1e30;
  for (int i = 0; i < 5; ++i) {
    std::atomic<int64_t> found{0};
    auto t0 = Clock::now();
    // glibc's memchr, vectorized for this CPU, looking for a byte that is
    // not there: a read of every byte at the pace of the loads.
    kernels::parallel(n, kernels::grain_for(n, 1 << 20), [&](int64_t b, int64_t e) {
      if (std::memchr(buf.data() + b, 1, static_cast<size_t>(e - b)) != nullptr) found += 1;
    });
    best_ms = std::min(best_ms, elapsed_ms(t0));
    if (found != 0) throw Error("bench forward: the bandwidth pass read wrong values");
  }
  return static_cast<double>(n) / (best_ms * 1e6);
}

double seconds(Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

int run_bench_forward(const BenchArgs& a) {
  set_compute_threads(a.threads);
  std::optional<WType> type;
  if (!a.dtype.empty()) type = parse_weight_type(a.dtype);
  std::shared_ptr<Model> model;
  if (!a.memory_budget.empty()) {
    if (a.model_dir.empty() || type) throw Error("bench forward: --memory-budget streams a --target's weights as stored (no --dtype)");
    StreamOptions s;
    s.budget_bytes = parse_bytes(a.memory_budget, stored_weight_bytes(a.model_dir));
    model = Model::load_streamed(a.model_dir, s);
  } else if (!a.model_dir.empty()) {
    model = Model::load(a.model_dir, type);
  } else {
    model = Model::random(load_model_config(a.random_config), 1234, type.value_or(WType::F32));
  }
  model->set_kv_type(parse_kv_type(a.kv_cache));
  const ModelConfig& c = model->config();
  const int64_t max_new = *std::max_element(a.new_tokens.begin(), a.new_tokens.end());
  const int64_t max_ctx = *std::max_element(a.contexts.begin(), a.contexts.end());
  KVCache cache = model->new_cache(std::min(c.max_position_embeddings, max_ctx + max_new));

  // Every row runs on a cache of exactly `context` real entries: a prefill of
  // fixed random ids (re-run only when a longer context is needed), then each
  // timed forward appends k more of the same ids and is rolled back.
  std::mt19937 gen(7);
  std::uniform_int_distribution<int32_t> any_id(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<int32_t> ids(static_cast<size_t>(cache.capacity()));
  for (int32_t& v : ids) v = any_id(gen);
  const int32_t* id = ids.data();
  // The prefill runs in chunks, as the server's does: one forward of a long
  // context's activations would otherwise set the peak RSS, which is meant
  // to show what decoding holds. The kernels are batch-invariant, so the
  // cache ends up bitwise as one forward would leave it.
  constexpr int64_t kPrefillChunk = 256;
  auto fill_to = [&](int64_t ctx) {
    cache.truncate(std::min(cache.size(), ctx));
    while (cache.size() < ctx) {
      ForwardRequest prefill;
      const int64_t end = std::min(ctx, cache.size() + kPrefillChunk);
      prefill.tokens = std::vector<int32_t>(id + cache.size(), id + end);
      prefill.logits_rows = std::vector<int64_t>{};
      model->forward(prefill, cache);
    }
  };

  nlohmann::json rows = nlohmann::json::array();
  // When the rows were timed, on the steady clock (CLOCK_MONOTONIC on Linux),
  // for a harness to count what happened beside them then and not during
  // the load or the bandwidth probe (bench/shared_cores.py).
  Clock::time_point timed_from{}, timed_to{};
  for (int64_t ctx : a.contexts) {
    if (ctx + max_new > cache.capacity()) {
      spdlog::warn("context {} skipped: the model's context is {}", ctx, c.max_position_embeddings);
      continue;
    }
    fill_to(ctx);
    // Rounds time every k once, in turn, so a slow spell on a shared machine
    // hits all rows alike and the ratios between rows stay fair.
    std::vector<ForwardRequest> reqs(a.new_tokens.size());
    std::vector<std::vector<double>> samples(a.new_tokens.size());
    for (size_t r = 0; r < reqs.size(); ++r) {
      reqs[r].tokens = std::vector<int32_t>(id + ctx, id + ctx + a.new_tokens[r]);
      if (a.last_logits) reqs[r].logits_rows = std::vector<int64_t>{a.new_tokens[r] - 1};
    }
    const auto start = Clock::now();
    if (timed_from == Clock::time_point{}) timed_from = start;
    for (int round = 0; round < a.warmup + a.min_samples || elapsed_ms(start) < a.min_seconds * 1000 * a.new_tokens.size();
         ++round) {
      for (size_t r = 0; r < reqs.size(); ++r) {
        cache.truncate(ctx);
        auto t0 = Clock::now();
        model->forward(reqs[r], cache);
        const double ms = elapsed_ms(t0);
        if (round >= a.warmup) samples[r].push_back(ms);
      }
    }
    timed_to = Clock::now();
    for (size_t r = 0; r < reqs.size(); ++r)
      rows.push_back({{"context", ctx},
                      {"new_tokens", a.new_tokens[r]},
                      {"ms", percentile(samples[r], 50)},
                      {"ms_p90", percentile(samples[r], 90)},
                      {"ms_p99", percentile(samples[r], 99)},
                      {"samples", samples[r].size()}});
  }
  // Before the bandwidth probe, whose gigabyte would be the peak.
  const MemoryUsage mem = memory_usage();
  const double bw = measure_read_bandwidth_gbs();
  const double bound_ms = model->weight_bytes() / (bw * 1e6);
  if (a.json) {
    std::cout << nlohmann::json{{"rows", rows},
                                {"weight_bytes", model->weight_bytes()},
                                {"parameters", c.num_parameters()},
                                {"threads", compute_threads()},
                                {"dtype", wtype_name(model->weight_type())},
                                {"kernels", kernels::isa()},
                                {"read_bandwidth_gbs", bw},
                                {"kv_cache", kv_type_name(cache.type())},
                                {"kv_cache_bytes", cache.bytes()},
                                {"rss_bytes", mem.rss_bytes},
                                {"peak_rss_bytes", mem.peak_rss_bytes},
                                {"bandwidth_bound_ms", bound_ms},
                                {"timed_steady_s", {seconds(timed_from), seconds(timed_to)}}}
                     .dump()
              << std::endl;
    return 0;
  }
  std::printf("model: %lld parameters, %.1f MB of %s weights, %d threads, %s kernels\n",
              static_cast<long long>(c.num_parameters()), model->weight_bytes() / 1e6, wtype_name(model->weight_type()),
              compute_threads(), kernels::isa());
  std::printf("memory read bandwidth: %.2f GB/s (sum over a 1 GiB buffer, best of 5)\n", bw);
  std::printf("memory: peak RSS %.1f MB (weights %.1f MB, %s KV cache %.1f MB)\n", mem.peak_rss_bytes / 1e6,
              model->weight_bytes() / 1e6, kv_type_name(cache.type()), cache.bytes() / 1e6);
  std::printf("bandwidth bound for one decode step: %.2f ms (weight bytes / bandwidth)\n\n", bound_ms);
  std::printf("%8s %10s %10s %12s %10s\n", "context", "new_tok", "ms", "ms/token", "vs_1tok");
  double one = 0;
  for (const auto& r : rows) {
    const double ms = r["ms"].get<double>();
    const int64_t k = r["new_tokens"].get<int64_t>();
    if (k == 1) one = ms;
    std::printf("%8lld %10lld %10.3f %12.3f %10.2f\n", static_cast<long long>(r["context"].get<int64_t>()),
                static_cast<long long>(k), ms, ms / k, one > 0 ? ms / one : 0.0);
  }
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (timings; not tests)");
  bench->require_subcommand(1);
  CLI::App* fwd = bench->add_subcommand("forward", "Milliseconds per forward for k new tokens at given contexts");
  auto* model = fwd->add_option("--target,--model", a->model_dir, "Model directory");
  auto* random = fwd->add_option("--random-init", a->random_config,
                                 "config.json of a model to build with random weights instead")
                     ->check(CLI::ExistingFile);
  model->excludes(random);
  random->excludes(model);
  fwd->add_option("--contexts", a->contexts, "Cached context lengths")->delimiter(',')->capture_default_str();
  fwd->add_option("--new-tokens", a->new_tokens, "New-token counts per forward")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  fwd->add_option("--min-seconds", a->min_seconds, "Measure each row for at least this long (rows are interleaved)")->capture_default_str();
  fwd->add_flag("--last-logits", a->last_logits, "Only the last row's logits, as a prompt's prefill needs (default: every row's, as a verification)");
  fwd->add_option("--warmup", a->warmup, "Untimed rounds first")->capture_default_str()->check(CLI::NonNegativeNumber);
  fwd->add_option("--min-samples", a->min_samples, "Timed rounds at least (a long prefill: 1)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  fwd->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores")->capture_default_str();
  fwd->add_option("--dtype", a->dtype, "Convert the weights to f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl|q4_k_m|q5_k_m|q3_k_m|q2_k|q6_k at load");
  fwd->add_option("--memory-budget", a->memory_budget,
                  "Stream the target's weights from disk: most memory they may take, e.g. 8MiB or 25% (of its weights as "
                  "stored), read ahead on a loader thread, as generate --memory-budget does");
  fwd->add_option("--kv-cache", a->kv_cache, "KV cache element type: f32 or f16")->capture_default_str();
  fwd->add_flag("--json", a->json,
                R"(Print {"rows": [{"context","new_tokens","ms" (median),"ms_p90","ms_p99","samples"}], "weight_bytes", )"
                R"("timed_steady_s" (when the rows were timed, on CLOCK_MONOTONIC), ...})");
  const std::function<int()> edge_cloud = add_bench_edge_cloud(*bench);
  const std::function<int()> exits = add_bench_exits(*bench);
  const std::function<int()> local = add_bench_local(*bench);
  const std::function<int()> drafters = add_bench_drafters(*bench);
  const std::function<int()> load = add_bench_load(*bench);
  const std::function<int()> regimes = add_bench_regimes(*bench);
  CLI::App* load_cmd = bench->get_subcommand("load");
  CLI::App* regimes_cmd = bench->get_subcommand("regimes");
  CLI::App* exits_cmd = bench->get_subcommand("exits");
  CLI::App* local_cmd = bench->get_subcommand("local");
  CLI::App* drafters_cmd = bench->get_subcommand("drafters");
  return {bench, [a, model, random, fwd, edge_cloud, exits, exits_cmd, local, local_cmd, drafters, drafters_cmd, load,
                  load_cmd, regimes, regimes_cmd]() {
            if (load_cmd->parsed()) return load();
            if (regimes_cmd->parsed()) return regimes();
            if (exits_cmd->parsed()) return exits();
            if (local_cmd->parsed()) return local();
            if (drafters_cmd->parsed()) return drafters();
            if (!fwd->parsed()) return edge_cloud();
            if (model->count() + random->count() != 1) throw Error("bench forward: give --target or --random-init");
            return run_bench_forward(*a);
          }};
}

}  // namespace splitspec::cli

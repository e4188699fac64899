// splitspec-gpu-bench: the CUDA backend measured and compared on a GPU
// (scripts/gpu_check.sh runs it).
//   speed    random-weight targets made on the GPU in Llama-3.2-1B and
//            Llama-3.1-8B shapes (BF16, and Q4_K_M by our quantizer): a
//            1-token decode and verifications of k rows over a cached
//            context, and S sessions' 5-token drafts in one forward; the
//            median of --repeats runs, against the bandwidth bound (weight
//            bytes over the device's measured copy rate, bytes read plus
//            written).
//   distribution  a server's sampled first token, cloud-ar and edge-sd,
//            against the GPU target's own distribution after the prompt
//            (Pearson's goodness of fit): speculative sampling on the GPU
//            keeps the target's distribution.
//   compare  a model file on the GPU against the CPU engine: per-position
//            logits NMSE (llama.cpp's test-backend-ops threshold for matrix
//            products is 5e-4) over each prompt and the GPU's greedy
//            continuation, and every position where the two greedy tokens
//            differ, with both backends' top-2 margins.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>

#include "client/client.h"
#include "common/backend/cpu_backend.h"
#include "common/backend/cuda/cuda_backend.h"
#include "common/decoding/sampling.h"
#include "common/decoding/target_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/chi_square.h"
#include "common/util/error.h"

namespace splitspec {
namespace {

using Clock = std::chrono::steady_clock;

ModelConfig llama_shape(const std::string& name) {
  ModelConfig c;
  c.vocab_size = 128256;
  c.rope_theta = 500000.0;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 4096;
  c.bos_token_id = 128000;
  c.eos_token_id = 128001;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  if (name == "1b") {  // Llama-3.2-1B
    c.hidden_size = 2048;
    c.intermediate_size = 8192;
    c.num_hidden_layers = 16;
    c.head_dim = 64;
    c.tie_word_embeddings = true;
  } else if (name == "8b") {  // Llama-3.1-8B
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_hidden_layers = 32;
    c.head_dim = 128;
    c.tie_word_embeddings = false;
  } else {
    throw Error("unknown shape '" + name + "' (1b or 8b)");
  }
  return c;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ','))
    if (!part.empty()) out.push_back(part);
  return out;
}

struct Timing {
  double median = 0, p10 = 0, p90 = 0;
  int n = 0;
};

Timing summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) { return ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1) + 0.5)]; };
  return {at(0.5), at(0.1), at(0.9), static_cast<int>(ms.size())};
}

// S sessions, each with `context` cached tokens, verifying `rows` tokens in
// one forward; every store is cut back to its context after each run.
Timing time_forwards(const Backend& b, int sessions, int rows, int context, int repeats) {
  const ModelConfig& c = b.config();
  std::vector<std::unique_ptr<KVStore>> kv;
  std::vector<ForwardRequest> req(static_cast<size_t>(sessions));
  for (int s = 0; s < sessions; ++s) {
    kv.push_back(b.new_kv(context + rows + 8));
    ForwardRequest pre;
    for (int i = 0; i < context; ++i) pre.tokens.push_back(static_cast<int32_t>((1000 + 37 * i + 101 * s) % c.vocab_size));
    pre.logits_rows = std::vector<int64_t>{};
    b.forward_batch({{&pre, kv.back().get()}});
    for (int i = 0; i < rows; ++i) req[s].tokens.push_back(static_cast<int32_t>((77 * i + 13 * s + 5) % c.vocab_size));
    // What a greedy verification asks: every row's argmax.
    req[s].argmax_only = true;
  }
  std::vector<Backend::Item> items;
  for (int s = 0; s < sessions; ++s) items.push_back({&req[s], kv[s].get()});
  std::vector<double> ms;
  for (int r = 0; r < repeats + 5; ++r) {
    const auto t0 = Clock::now();
    b.forward_batch(items);
    const double dt = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    for (auto& k : kv) k->truncate(context);
    if (r >= 5) ms.push_back(dt);  // five to warm up
  }
  return summarize(ms);
}

int run_speed(const std::string& shapes, const std::string& types, const std::string& rows_list,
              const std::string& sessions_list, int repeats, int context, const std::string& device,
              const std::string& json_path) {
  const Device d = parse_device(device);
  const double rate = cuda::copy_rate(d.index);
  std::printf("device %s; copy rate %.0f GB/s (read + written)\n", cuda::status().names.at(d.index).c_str(), rate / 1e9);
  nlohmann::json out = {{"device", cuda::status().names.at(d.index)}, {"copy_rate_gbs", rate / 1e9}, {"results", {}}};
  std::printf("| shape | type | sessions x rows | median ms | p10-p90 | x 1-token | x bound (ms) |\n|---|---|---|---|---|---|---|\n");
  for (const std::string& shape : split(shapes))
    for (const std::string& type : split(types)) {
      const ModelConfig c = llama_shape(shape);
      const WType t = type == "bf16" ? WType::BF16 : type == "q4_k_m" ? WType::Q4_K : parse_weight_type(type);
      const auto made = Clock::now();
      const std::shared_ptr<Backend> b = cuda::random(c, t, 1, 0.02f, {d, KVType::F16, {}});
      const double make_s = std::chrono::duration<double>(Clock::now() - made).count();
      const double bound_ms = static_cast<double>(b->weight_bytes()) / rate * 1e3;
      double one = 0;
      auto report = [&](int sessions, int rows, const Timing& tm) {
        if (sessions == 1 && rows == 1) one = tm.median;
        std::printf("| %s | %s | %d x %d | %.3f | %.3f-%.3f | %.2f | %.2f (%.3f) |\n", shape.c_str(), type.c_str(), sessions,
                    rows, tm.median, tm.p10, tm.p90, one > 0 ? tm.median / one : 0.0, tm.median / bound_ms, bound_ms);
        std::fflush(stdout);
        out["results"].push_back({{"shape", shape}, {"type", type}, {"sessions", sessions}, {"rows", rows},
                                  {"median_ms", tm.median}, {"p10_ms", tm.p10}, {"p90_ms", tm.p90}, {"n", tm.n},
                                  {"weight_bytes", b->weight_bytes()}, {"bound_ms", bound_ms},
                                  {"vs_one_token", one > 0 ? tm.median / one : 0.0}, {"make_s", make_s},
                                  {"context", context}, {"numerics", b->numerics().summary()}});
      };
      for (const std::string& r : split(rows_list)) report(1, std::stoi(r), time_forwards(*b, 1, std::stoi(r), context, repeats));
      // A session's round: its last token and a 5-token draft.
      for (const std::string& s : split(sessions_list))
        report(std::stoi(s), 6, time_forwards(*b, std::stoi(s), 6, context, repeats));
    }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(1) << "\n";
  return 0;
}

std::vector<std::string> read_prompts(const std::string& path, int n) {
  std::vector<std::string> out;
  if (path.empty()) {
    out = {"Once upon a time", "The robot arm moves to the left", "def main():\n    print(", "1 + 1 = 2, 2 + 2 ="};
  } else {
    std::ifstream in(path);
    if (!in) throw Error(path + ": cannot read the prompts");
    std::string line;
    while (std::getline(in, line) && static_cast<int>(out.size()) < n) {
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line);
      out.push_back(j.contains("prompt") ? j["prompt"].get<std::string>() : j["turns"][0].get<std::string>());
    }
  }
  if (static_cast<int>(out.size()) > n) out.resize(static_cast<size_t>(n));
  return out;
}

double top2_margin(const float* row, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (row[i] > a) {
      b = a;
      a = row[i];
    } else if (row[i] > b) {
      b = row[i];
    }
  }
  return static_cast<double>(a) - b;
}

int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

int run_compare(const std::string& target, const std::string& prompts_path, int n, int new_tokens,
                const std::string& device, const std::string& json_path) {
  const std::shared_ptr<Backend> gpu = open_backend(target, {parse_device(device), KVType::F32, {}});
  const CpuBackend cpu(Model::load(target));
  const Tokenizer tok(target);
  const ModelConfig& c = cpu.config();
  nlohmann::json out = {{"target", target}, {"gpu", gpu->numerics().summary()}, {"cpu", cpu.numerics().summary()},
                        {"prompts", {}}};
  double worst = 0, total = 0;
  int64_t positions = 0, divergences = 0;
  for (const std::string& text : read_prompts(prompts_path, n)) {
    std::vector<int32_t> ids = tok.encode(text);
    if (c.bos_token_id >= 0 && (ids.empty() || ids[0] != c.bos_token_id)) ids.insert(ids.begin(), static_cast<int32_t>(c.bos_token_id));
    GenerateOptions o;
    o.max_new_tokens = new_tokens;
    o.ignore_eos = true;
    TargetDecoder dec(*gpu, ids, o);
    while (!dec.finished()) dec.step();
    const std::vector<int32_t>& seq = dec.sequence();
    // Teacher-forced on both: the rows that predicted each generated token.
    ForwardRequest r;
    r.tokens = seq;
    std::vector<int64_t> rows;
    for (size_t i = ids.size() - 1; i + 1 < seq.size(); ++i) rows.push_back(static_cast<int64_t>(i));
    r.logits_rows = rows;
    const auto kg = gpu->new_kv(static_cast<int64_t>(seq.size())), kc = cpu.new_kv(static_cast<int64_t>(seq.size()));
    const ForwardResult g = std::move(gpu->forward_batch({{&r, kg.get()}})[0]);
    const ForwardResult k = std::move(cpu.forward_batch({{&r, kc.get()}})[0]);
    nlohmann::json p = {{"prompt", text}, {"nmse", nlohmann::json::array()}, {"divergences", nlohmann::json::array()}};
    for (int64_t i = 0; i < static_cast<int64_t>(rows.size()); ++i) {
      const float* a = g.logits.row(i);
      const float* b = k.logits.row(i);
      double err = 0, norm = 0;
      for (int64_t v = 0; v < c.vocab_size; ++v) {
        err += (static_cast<double>(a[v]) - b[v]) * (static_cast<double>(a[v]) - b[v]);
        norm += static_cast<double>(b[v]) * b[v];
      }
      const double e = norm > 0 ? err / norm : err;
      p["nmse"].push_back(e);
      worst = std::max(worst, e);
      total += e;
      ++positions;
      if (argmax(a, c.vocab_size) != argmax(b, c.vocab_size)) {
        ++divergences;
        p["divergences"].push_back({{"position", rows[i] + 1 - static_cast<int64_t>(ids.size())},
                                    {"gpu_token", argmax(a, c.vocab_size)}, {"cpu_token", argmax(b, c.vocab_size)},
                                    {"gpu_top2_margin", top2_margin(a, c.vocab_size)},
                                    {"cpu_top2_margin", top2_margin(b, c.vocab_size)}});
      }
    }
    out["prompts"].push_back(p);
  }
  out["max_nmse"] = worst;
  out["mean_nmse"] = positions ? total / static_cast<double>(positions) : 0.0;
  out["positions"] = positions;
  out["divergences"] = divergences;
  std::printf("%s: %lld positions, NMSE mean %.3g max %.3g (threshold 5e-4), %lld greedy divergences\n", target.c_str(),
              static_cast<long long>(positions), out["mean_nmse"].get<double>(), worst, static_cast<long long>(divergences));
  for (const auto& p : out["prompts"])
    for (const auto& dv : p["divergences"])
      std::printf("  divergence at generated position %lld: gpu %d (margin %.4g) cpu %d (margin %.4g)\n",
                  dv["position"].get<long long>(), dv["gpu_token"].get<int>(), dv["gpu_top2_margin"].get<double>(),
                  dv["cpu_token"].get<int>(), dv["cpu_top2_margin"].get<double>());
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(1) << "\n";
  return worst <= 5e-4 ? 0 : 3;
}

int run_distribution(const std::string& server, const std::string& target, const std::string& draft, int samples,
                     float temperature, const std::string& device, const std::string& json_path) {
  const std::shared_ptr<Backend> gpu = open_backend(target, {parse_device(device), KVType::F32, {}});
  const Tokenizer tok(target);
  std::vector<int32_t> prompt = tok.encode("Once upon a time");
  const ModelConfig& c = gpu->config();
  if (c.bos_token_id >= 0) prompt.insert(prompt.begin(), static_cast<int32_t>(c.bos_token_id));
  ForwardRequest r;
  r.tokens = prompt;
  r.logits_rows = std::vector<int64_t>{static_cast<int64_t>(prompt.size()) - 1};
  const auto kv = gpu->new_kv(static_cast<int64_t>(prompt.size()));
  const ForwardResult out = std::move(gpu->forward_batch({{&r, kv.get()}})[0]);
  SamplingParams params;
  params.temperature = temperature;
  const Distribution p = filtered_distribution(out.logits.row(0), c.vocab_size, params);
  const std::vector<double> probs(p.begin(), p.end());
  nlohmann::json result = {{"server", server}, {"samples", samples}, {"temperature", temperature}, {"modes", {}}};
  bool ok = true;
  for (const std::string mode : {"cloud-ar", "edge-sd"}) {
    ClientOptions o;
    o.verifier = VerifierKind::kServer;
    o.server = server;
    o.drafter = mode == "edge-sd" ? "model" : "none";
    o.draft_dir = draft;
    o.tokenizer = target;
    o.threads = 1;
    const auto client = Client::connect(o);
    std::vector<int64_t> counts(static_cast<size_t>(c.vocab_size), 0);
    for (int i = 0; i < samples; ++i) {
      Request req;
      req.max_new_tokens = 3;
      req.temperature = temperature;
      req.seed = 1000 + static_cast<uint64_t>(i);
      req.ignore_eos = true;
      counts[static_cast<size_t>(client->generate_ids(prompt, req).ids.at(0))] += 1;
    }
    const double pv = goodness_of_fit_pvalue(counts, probs);
    ok = ok && pv > 1e-3;
    std::printf("%s: first token of %d seeded generations against the GPU target's distribution: p = %.4g\n",
                mode.c_str(), samples, pv);
    result["modes"][mode] = {{"pvalue", pv}};
  }
  result["passed"] = ok;
  if (!json_path.empty()) std::ofstream(json_path) << result.dump(1) << "\n";
  return ok ? 0 : 3;
}

}  // namespace
}  // namespace splitspec

int main(int argc, char** argv) {
  CLI::App app{"splitspec-gpu-bench: the CUDA backend's speed and its numerics against the CPU, on a GPU"};
  app.require_subcommand(1);
  std::string shapes = "1b,8b", types = "bf16,q4_k_m", rows = "1,5,17,64", sessions = "8,32", device = "cuda", json;
  int repeats = 50, context = 512;
  auto* speed = app.add_subcommand("speed", "Random-weight Llama-3.2-1B and 3.1-8B shapes: decode, verification and batch times");
  speed->add_option("--shapes", shapes, "1b, 8b")->capture_default_str();
  speed->add_option("--types", types, "bf16, q4_k_m")->capture_default_str();
  speed->add_option("--rows", rows, "rows of one session's verification (1: a decode step)")->capture_default_str();
  speed->add_option("--sessions", sessions, "sessions verifying 5-token drafts in one forward")->capture_default_str();
  speed->add_option("--repeats", repeats, "timed runs of each (after 5 to warm up)")->capture_default_str();
  speed->add_option("--context", context, "tokens cached before each run")->capture_default_str();
  std::string target, prompts;
  int n = 8, new_tokens = 24;
  auto* compare = app.add_subcommand("compare", "A model file on the GPU against the CPU: logits NMSE and greedy divergences");
  compare->add_option("--target", target, "the model (GGUF file or directory, with its tokenizer)")->required();
  compare->add_option("--prompts", prompts, "a JSON-lines file of {\"prompt\": ...} or {\"turns\": [...]}");
  compare->add_option("--prompts-count", n, "prompts to take")->capture_default_str();
  compare->add_option("--new-tokens", new_tokens, "greedy tokens generated on the GPU per prompt")->capture_default_str();
  std::string server, draft;
  int samples = 400;
  float temperature = 0.8f;
  auto* dist = app.add_subcommand("distribution", "A server's sampled first token against the GPU target's distribution");
  dist->add_option("--server", server, "HOST:PORT of a server on the GPU")->required();
  dist->add_option("--target", target, "the server's target, here on the GPU too")->required();
  dist->add_option("--draft", draft, "the draft model for edge-sd")->required();
  dist->add_option("--samples", samples, "seeded generations per mode")->capture_default_str();
  dist->add_option("--temperature", temperature)->capture_default_str();
  for (CLI::App* c : {speed, compare, dist}) {
    c->add_option("--device", device, "cuda or cuda:N")->capture_default_str();
    c->add_option("--json", json, "also write the results here");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*speed) return splitspec::run_speed(shapes, types, rows, sessions, repeats, context, device, json);
    if (*dist) return splitspec::run_distribution(server, target, draft, samples, temperature, device, json);
    return splitspec::run_compare(target, prompts, n, new_tokens, device, json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "splitspec-gpu-bench: error: %s\n", e.what());
    return 1;
  }
}

#include "tests/test_util.h"

#include "common/backend/cpu_backend.h"
#include "client/local_verifier.h"
#include "common/decoding/target_decoder.h"
#include "common/kernels/quant.h"
#include "common/util/error.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

namespace fs = std::filesystem;

namespace splitspec::test {

TempDir::TempDir() {
  std::random_device rd;
  path_ = fs::temp_directory_path() / ("splitspec-test-" + std::to_string(rd()) + std::to_string(rd()));
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

ModelConfig tiny_config(int64_t vocab, int64_t layers, bool tied) {
  ModelConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.vocab_size = vocab;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  return c;
}

ModelConfig tiny_qwen35_config(int64_t vocab, int64_t layers) {
  ModelConfig c = tiny_config(vocab, layers, true);
  c.architecture = "qwen35";
  c.qk_norm = true;
  c.attn_output_gate = true;
  c.rotary_dim = 4;
  c.ssm_conv_kernel = 4;
  c.ssm_key_heads = 2;
  c.ssm_value_heads = 4;
  c.ssm_head_dim = 8;
  for (int64_t l = 0; l < layers; ++l) c.recurrent_layers.push_back((l + 1) % 4 != 0);
  return c;
}

ModelConfig tiny_gemma3_config(int64_t vocab, int64_t layers, int64_t window, int64_t pattern) {
  ModelConfig c = tiny_config(vocab, layers, true);
  c.architecture = "gemma3";
  c.activation = Activation::kGeluTanh;
  c.scale_embeddings = true;
  c.post_norms = true;
  c.qk_norm = true;
  c.query_pre_attn_scalar = 8;
  c.sliding_window = window;
  c.sliding_window_pattern = pattern;
  c.rope_local_theta = 100.0;
  c.rope_theta = 1000000.0;
  return c;
}

ModelConfig tiny_gemma4_config(int64_t vocab) {
  // Eight layers, every fourth global; the last four share the keys and
  // values of layers 2 (local) and 3 (global, whose value is its key).
  ModelConfig c = tiny_gemma3_config(vocab, 8, 4, 4);
  c.architecture = "gemma4";
  c.query_pre_attn_scalar = 1.0;
  c.value_norm = true;
  c.head_dim = 16;
  // Proportional RoPE as Gemma 4's converter writes it: a quarter of the
  // global layers' pairs rotate, the rest have 1e30 divisors.
  c.rope_freq_factors = {1.0f, 1.0f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f};
  c.local_head_dim = 8;
  c.local_kv_heads = 1;
  c.layer_intermediate_sizes = {64, 64, 64, 64, 128, 128, 128, 128};
  c.shared_kv_layers = 4;
  c.value_is_key_layers = {0, 0, 0, 1, 0, 0, 0, 0};
  c.per_layer_input_size = 8;
  c.layer_output_scale = true;
  c.final_logit_softcap = 30.0;
  return c;
}

ModelConfig tiny_longrope_config(int64_t vocab, int64_t layers) {
  ModelConfig c = tiny_config(vocab, layers);
  c.architecture = "phi3";
  c.rotary_dim = 6;
  c.rope_short_factors = {1.0f, 1.5f, 2.0f};
  c.rope_long_factors = {1.0f, 4.0f, 16.0f};
  c.rope_original_context = 16;
  c.rope_attention_factor = 1.25;
  return c;
}

RecurrentHeadConfig small_recurrent_head(int64_t hidden, int64_t vocab) {
  RecurrentHeadConfig c;
  c.hidden_size = hidden;
  c.vocab_size = vocab;
  c.embed_dim = 16;
  c.exit_dim = 24;
  c.num_blocks = 2;
  c.rank = 8;
  return c;
}

std::string demo_target_dir() { return std::string(SPLITSPEC_SOURCE_DIR) + "/models/demo-target"; }
std::string demo_draft_dir() { return std::string(SPLITSPEC_SOURCE_DIR) + "/models/demo-draft"; }

std::vector<std::vector<double>> token_marginals(const Model& target, const std::vector<int32_t>& prompt,
                                                 const SamplingParams& params, int tokens) {
  auto next = [&](const std::vector<int32_t>& seq) {
    KVCache cache = target.new_cache();
    ForwardRequest f;
    f.tokens = seq;
    f.logits_rows = std::vector<int64_t>{static_cast<int64_t>(seq.size()) - 1};
    const ForwardResult out = target.forward(f, cache);
    return filtered_distribution(out.logits.row(0), out.logits.cols(), params);
  };
  const size_t vocab = static_cast<size_t>(target.config().vocab_size);
  std::vector<std::vector<double>> m(static_cast<size_t>(tokens), std::vector<double>(vocab, 0.0));
  // Every continuation of up to `tokens` - 1 tokens with its probability.
  std::function<void(std::vector<int32_t>&, double, int)> walk = [&](std::vector<int32_t>& seq, double prob, int depth) {
    const Distribution p = next(seq);
    for (size_t y = 0; y < vocab; ++y) {
      m[depth][y] += prob * p[y];
      if (depth + 1 < tokens && p[y] > 0) {
        seq.push_back(static_cast<int32_t>(y));
        walk(seq, prob * p[y], depth + 1);
        seq.pop_back();
      }
    }
  };
  std::vector<int32_t> seq = prompt;
  walk(seq, 1.0, 0);
  return m;
}

TwoTokenMarginals two_token_marginals(const Model& target, const std::vector<int32_t>& prompt, const SamplingParams& params) {
  std::vector<std::vector<double>> m = token_marginals(target, prompt, params, 2);
  return {std::move(m[0]), std::move(m[1])};
}

const std::vector<std::string>& test_prompts() {
  static const std::vector<std::string> prompts = {
      "The ship sailed",
      "Call me Ishmael. Some years ago",
      "The President said that the Congress",
      "It was a dark and stormy night",
      "In the morning the captain",
      "Our nation has always",
      "She looked at the old house and",
      "The whale rose from the sea",
      "Fellow citizens, the state of the Union",
      "He walked down the street",
      "What is the meaning of",
      "The committee reported that",
  };
  return prompts;
}

std::shared_ptr<Model> noisy_copy(const Model& target, double noise, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<float> normal(0.0f, static_cast<float>(noise));
  const WeightSet& from = target.weight_set();
  // A streamed model's matrices are on disk, not in its weight set.
  if (static_cast<int64_t>(from.layers.size()) != target.config().num_hidden_layers)
    throw Error("noisy_copy: " + target.name() + " holds no weights in memory (streamed?)");
  WeightSet w;
  w.hidden = from.hidden;
  w.norms = from.norms;
  w.vectors = from.vectors;
  auto copy = [&](const MatrixRef& m, bool jitter) {
    WeightBytes& bytes = w.owned.emplace_back(static_cast<size_t>(m.rows * m.cols) * sizeof(float));
    auto* values = reinterpret_cast<float*>(bytes.data());
    dequantize_rows(m, 0, m.rows, values);
    if (jitter)
      for (int64_t i = 0; i < m.rows * m.cols; ++i) values[i] += normal(engine);
    return MatrixRef{WType::F32, values, m.rows, m.cols};
  };
  w.embed = copy(from.embed, true);
  for (const auto& layer : from.layers) {
    auto& to = w.layers.emplace_back();
    for (int m = 0; m < kLayerMatrices; ++m) {
      const auto lm = static_cast<LayerMatrix>(m);
      to[m] = copy(layer[m], lm == LayerMatrix::kQ || lm == LayerMatrix::kGate || lm == LayerMatrix::kDown);
    }
  }
  w.lm_head = target.config().tie_word_embeddings ? w.embed : copy(from.lm_head, true);
  return Model::from_weight_set(target.config(), std::move(w), "noisy-draft");
}

std::optional<fs::path> shared_dir() {
  if (const char* env = std::getenv("SPLITSPEC_SHARED_DIR")) {
    if (fs::is_directory(env)) return fs::path(env);
    return std::nullopt;
  }
  const fs::path p = fs::path(SPLITSPEC_SOURCE_DIR) / ".." / "shared";
  if (fs::is_directory(p)) return fs::canonical(p);
  return std::nullopt;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}


}  // namespace splitspec::test

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>

#include <thread>

extern char** environ;

namespace splitspec::test {

Child::Child(const std::vector<std::string>& argv, const std::string& out_path, const std::string& err_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &files, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + " failed");
  pid_ = pid;
}

Child::~Child() {
  if (!reaped_) {
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

void Child::signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

std::optional<int> Child::wait(std::chrono::milliseconds timeout) {
  if (reaped_) return std::nullopt;
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      reaped_ = true;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (std::chrono::steady_clock::now() >= end) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Reference target_alone(const Model& target, const std::vector<int32_t>& prompt, const GenerateOptions& options) {
  const CpuBackend cpu(target);
  TargetDecoder dec(cpu, prompt, options);
  Reference r;
  while (!dec.finished()) {
    const RoundResult step = dec.step();
    r.output_ids.insert(r.output_ids.end(), step.verdict.tokens.begin(), step.verdict.tokens.end());
  }
  r.finish_reason = finish_reason_name(dec.finish());
  r.target_forwards = dec.forwards();
  return r;
}

RoundLoopResult decode_locally(const std::shared_ptr<const Model>& target, Drafter& drafter,
                               const std::vector<int32_t>& prompt, const GenerateOptions& options, int32_t gamma) {
  LocalVerifier verifier(std::make_shared<CpuBackend>(target));
  RoundLoopOptions o;
  o.generate = options;
  o.speculative.gamma = gamma;
  return run_round_loop(drafter, verifier, prompt, o);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

CliRun run_cli(const std::string& args) { return run_binary("splitspec", args); }

CliRun run_binary(const std::string& name, const std::string& args) {
  TempDir tmp;
  const std::string cmd =
      std::string(SPLITSPEC_BIN_DIR) + "/" + name + " " + args + " >" + tmp.str("out") + " 2>" + tmp.str("err");
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_file(tmp.path() / "out"), read_file(tmp.path() / "err")};
}

}  // namespace splitspec::test

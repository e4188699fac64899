#pragma once
// Helpers shared by the tests of every tier, free of LibTorch (reference.h
// adds the references the unit tests compute against).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <vector>
#include <optional>
#include <string>

#include "client/client.h"
#include "client/round_loop.h"
#include "common/decoding/generate_options.h"
#include "common/decoding/verify.h"
#include "common/drafting/recurrent_head.h"
#include "common/model/model.h"
#include "common/model/model_config.h"
#include "common/util/chi_square.h"

namespace splitspec::test {

// A fresh directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::string str(const std::string& child = "") const { return (child.empty() ? path_ : path_ / child).string(); }

 private:
  std::filesystem::path path_;
};

// The target alone, one token at a time (TargetDecoder::step): the oracle
// every mode must reproduce.
struct Reference {
  std::vector<int32_t> output_ids;
  std::string finish_reason;
  int64_t target_forwards = 0;
};
Reference target_alone(const Model& target, const std::vector<int32_t>& prompt, const GenerateOptions& options);

// One generation through the round loop with `drafter` and the local verifier.
RoundLoopResult decode_locally(const std::shared_ptr<const Model>& target, Drafter& drafter,
                               const std::vector<int32_t>& prompt, const GenerateOptions& options,
                               int32_t gamma = Request{}.gamma);

std::string demo_target_dir();
std::string demo_draft_dir();

// The target's own distributions of the first two tokens it would emit after
// `prompt` under `params`: p(x) and the marginal sum_x p(x) p(y | x).
struct TwoTokenMarginals {
  std::vector<double> first, second;
};
TwoTokenMarginals two_token_marginals(const Model& target, const std::vector<int32_t>& prompt, const SamplingParams& params);

// The target's marginal distribution of each of the first `tokens` tokens it
// would emit after `prompt` under `params` (every continuation enumerated:
// tiny vocabularies only).
std::vector<std::vector<double>> token_marginals(const Model& target, const std::vector<int32_t>& prompt,
                                                 const SamplingParams& params, int tokens);

// English prompts of a few words each, for exactness over many prompts.
const std::vector<std::string>& test_prompts();

// A draft that agrees with `target` often but not always: its weights, as
// floats, with Gaussian noise of deviation `noise` added to the embedding,
// the head and some of each layer's matrices.
std::shared_ptr<Model> noisy_copy(const Model& target, double noise, uint64_t seed);

// Small LLaMA shapes with grouped-query attention (2 query heads per KV head).
ModelConfig tiny_config(int64_t vocab = 50, int64_t layers = 2, bool tied = false);
// tiny_config as Gemma 3 (GeGLU, post norms, the embedding scale, q/k
// norms, every `pattern`-th layer global and the rest in a sliding window of
// `window`) and as Phi-3 with LongRoPE over a partial rotary (6 of 8 dims,
// the long factors past a 16-token original context).
ModelConfig tiny_gemma3_config(int64_t vocab, int64_t layers, int64_t window = 3, int64_t pattern = 2);
// tiny_config as Qwen3.5: delta-rule layers (two key heads, four value
// heads of 8, a convolution of 4 taps) with every fourth layer gated full
// attention, query and key norms, RoPE on half of each head.
ModelConfig tiny_qwen35_config(int64_t vocab = 50, int64_t layers = 4);
// Gemma 4's options in small: local and global layers of their own head
// sizes and key-value heads, shared keys and values, per-layer inputs, a
// value that is its key, output scales, soft-capped logits.
ModelConfig tiny_gemma4_config(int64_t vocab = 50);
ModelConfig tiny_longrope_config(int64_t vocab, int64_t layers);
// A small recurrent draft head (ReDrafter's) for a target of these widths.
RecurrentHeadConfig small_recurrent_head(int64_t hidden, int64_t vocab);

// The `splitspec` binary run with `args` through the shell: exit status,
// stdout and stderr.
struct CliRun {
  int status;
  std::string out;
  std::string err;
};
CliRun run_cli(const std::string& args);
// The same for another of the project's binaries, e.g. "splitspec-example".
CliRun run_binary(const std::string& name, const std::string& args);

// ../shared beside the checkout (or $SPLITSPEC_SHARED_DIR), when present.
std::optional<std::filesystem::path> shared_dir();

std::string read_file(const std::filesystem::path& p);
void write_file(const std::filesystem::path& p, const std::string& bytes);

// Pearson's goodness of fit (common/util/chi_square.h).
using splitspec::chi_square_pvalue;
using splitspec::goodness_of_fit_pvalue;

}  // namespace splitspec::test

namespace splitspec::test {

// A child process (posix_spawn, stdout and stderr to files), SIGKILLed and
// reaped at scope exit if still running: containers' PID 1 may not reap.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& out_path, const std::string& err_path);
  ~Child();
  int pid() const { return pid_; }
  void signal(int sig);
  // The exit status once the child has exited within `timeout`; -1 when it
  // was killed by a signal; nullopt when it is still running.
  std::optional<int> wait(std::chrono::milliseconds timeout);

 private:
  int pid_ = -1;
  bool reaped_ = false;
};

// The message of the splitspec::Error `f` throws, or "" when it throws none.
std::string error_of(const std::function<void()>& f);

// Polls `pred` every few ms until it holds or `timeout` passes.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

}  // namespace splitspec::test

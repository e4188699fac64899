#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "client/cli/commands.h"
#include "client/local_ar.h"
#include "common/error.h"
#include "common/model.h"
#include "common/threads.h"
#include "common/tokenizer.h"

namespace splitspec::cli {

namespace {

struct GenerateArgs {
  std::string model_dir;
  std::string prompt;
  bool text_prompt = false;  // --prompt given (possibly empty: BOS alone)
  std::vector<int32_t> prompt_ids;
  GenerateOptions options;
  int threads = 0;
  bool json = false;
};

// The tokenizer is needed for --prompt and for printing text; a model given
// only --prompt-ids may come without one.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir, const ModelConfig& config, bool required) {
  const auto path = std::filesystem::path(dir) / "tokenizer.model";
  if (!std::filesystem::exists(path)) {
    if (required) throw Error(path.string() + ": tokenizer not found (needed for --prompt; use --prompt-ids)");
    spdlog::warn("{}: no tokenizer, output is token ids only", path.string());
    return nullptr;
  }
  auto tok = std::make_unique<Tokenizer>(path.string());
  if (tok->vocab_size() > config.vocab_size)
    throw Error(path.string() + ": tokenizer has " + std::to_string(tok->vocab_size()) +
                " pieces but the model's vocab_size is " + std::to_string(config.vocab_size));
  return tok;
}

int run_generate(const GenerateArgs& a) {
  set_compute_threads(a.threads);
  auto model = Model::load(a.model_dir);
  auto tok = load_tokenizer(a.model_dir, model->config(), a.text_prompt);
  std::vector<int32_t> prompt_ids = a.prompt_ids;
  if (a.text_prompt) {
    prompt_ids = tok->encode(a.prompt);
    prompt_ids.insert(prompt_ids.begin(), static_cast<int32_t>(model->config().bos_token_id));
  }
  spdlog::info("model {}: {} layers, hidden {}, vocab {}, {:.1f} MB of weights, {} threads", a.model_dir,
               model->config().num_hidden_layers, model->config().hidden_size, model->config().vocab_size,
               model->weight_bytes() / 1e6, compute_threads());

  // Created at the first token, after generation has validated the prompt.
  std::unique_ptr<TextStreamer> streamer;
  TokenCallback on_token = [&](int32_t id) {
    if (!tok) return;
    if (!streamer) streamer = std::make_unique<TextStreamer>(*tok, prompt_ids);
    std::string piece = streamer->push(id);
    if (!a.json) std::cout << piece << std::flush;
  };
  Generation g = generate_local_ar(*model, prompt_ids, a.options, on_token);
  std::string tail = streamer ? streamer->finish() : "";

  if (a.json) {
    nlohmann::json out = {
        {"mode", "local-ar"},
        {"prompt_ids", prompt_ids},
        {"output_ids", g.output_ids},
        {"text", tok ? nlohmann::json(streamer ? streamer->text() : "") : nlohmann::json(nullptr)},
        {"finish_reason", g.finish_reason},
        {"stats",
         {{"new_tokens", g.stats.new_tokens},
          {"wall_ms", g.stats.wall_ms},
          {"ms_per_token", g.stats.ms_per_token},
          {"prefill_ms", g.stats.prefill_ms},
          {"target_forwards", g.stats.target_forwards}}},
    };
    std::cout << out.dump() << std::endl;
  } else {
    if (!tok) {
      for (size_t i = 0; i < g.output_ids.size(); ++i) std::cout << (i ? "," : "") << g.output_ids[i];
    }
    std::cout << tail << std::endl;
    std::cerr << "[local-ar] " << g.stats.new_tokens << " tokens, " << g.stats.wall_ms << " ms, "
              << g.stats.ms_per_token << " ms/token, " << g.stats.target_forwards
              << " target forwards, finish: " << g.finish_reason << "\n";
  }
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text locally with one model (autoregressive)");
  cmd->add_option("--model", a->model_dir, "Model directory (config.json, model.safetensors, tokenizer.model)")
      ->required();
  auto* prompt = cmd->add_option("--prompt", a->prompt, "Prompt text; tokenized, with BOS prepended");
  auto* ids = cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt as comma-separated token ids, used verbatim")
                  ->delimiter(',');
  prompt->excludes(ids);
  ids->excludes(prompt);
  cmd->add_option("--max-new-tokens", a->options.max_new_tokens, "Tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", a->options.sampling.temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", a->options.sampling.top_k, "Keep the k most likely tokens; 0 keeps all")
      ->capture_default_str();
  cmd->add_option("--top-p", a->options.sampling.top_p, "Nucleus sampling mass in (0, 1]; 1 keeps all")
      ->capture_default_str();
  cmd->add_option("--seed", a->options.sampling.seed, "Random seed for sampling")->capture_default_str();
  cmd->add_flag("--ignore-eos", a->options.ignore_eos, "Keep generating after the end-of-sequence token");
  cmd->add_flag("--json", a->json, "Print one JSON object with ids, text and stats instead of streaming text");
  cmd->add_option("--threads", a->threads, "Compute threads (LibTorch and OpenBLAS); 0 uses every core")
      ->capture_default_str();
  return {cmd, [a, prompt, ids]() {
            if (prompt->count() == 0 && ids->count() == 0) throw Error("generate: give --prompt or --prompt-ids");
            a->text_prompt = prompt->count() > 0;
            return run_generate(*a);
          }};
}

}  // namespace splitspec::cli

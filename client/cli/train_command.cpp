#include <cstdio>
#include <iostream>
#include <memory>

#include <spdlog/fmt/fmt.h>

#include "client/cli/commands.h"
#include "common/tokenizer/tokenizer.h"
#include "common/train/exit_trainer.h"
#include "common/train/lut_builder.h"
#include "common/train/recurrent_trainer.h"
#include "common/train/train_threads.h"
#include "common/train/trainer.h"
#include "common/util/error.h"

namespace splitspec::cli {

namespace {

struct TrainArgs {
  TokenizerTrainOptions tokenizer;
  TrainJob job;
  ExitTrainJob exits;
  LutBuildJob lut;
  RecurrentTrainJob recurrent;
  std::string config_path;
  std::string rank_target, rank_corpus;
  int threads = 0;
};

}  // namespace

Command add_train_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* train = app.add_subcommand("train", "Train a tokenizer, a language model, or a draft by distillation");
  train->require_subcommand(1);

  CLI::App* tok = train->add_subcommand("tokenizer", "Train a SentencePiece BPE tokenizer with byte fallback");
  tok->add_option("--corpus", a->tokenizer.corpus, "Plain-text corpus")->required();
  tok->add_option("--vocab-size", a->tokenizer.vocab_size, "Vocabulary size")->capture_default_str();
  tok->add_option("--out", a->tokenizer.out_dir, "Output directory (receives tokenizer.model)")->required();
  tok->add_option("--max-sentences", a->tokenizer.max_sentences, "Lines sampled for training")->capture_default_str();

  auto add_common = [&](CLI::App* cmd, bool config_required) {
    auto* config = cmd->add_option("--config", a->config_path,
                                   config_required ? "Training config: {\"model\": {...}, \"train\": {...}} (see configs/)"
                                                   : "Training config: {\"model\": {...}, \"train\": {...}} (see configs/); "
                                                     "default: a 2-layer, 256-wide draft of the teacher's vocabulary, tied "
                                                     "embedding, 500 steps of 4 x 128 tokens");
    if (config_required) config->required();
    cmd->add_option("--corpus", a->job.corpus, "Training text (documents separated by blank lines)")->required();
    cmd->add_option("--valid", a->job.valid, "Validation text")->required();
    cmd->add_option("--out", a->job.out_dir, "Output model directory (Hugging Face layout)")->required();
    cmd->add_flag("--resume", a->job.resume, "Continue from the checkpoint in --out");
    cmd->add_option("--init", a->job.init,
                    "Start from this model directory's weights instead of a random init (its config must match)");
    cmd->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores")->capture_default_str();
  };
  CLI::App* lm = train->add_subcommand("lm", "Train a LLaMA language model on a corpus");
  add_common(lm, true);
  lm->add_option("--tokenizer", a->job.tokenizer,
                 "A model directory, tokenizer.model or a GGUF vocabulary (llama.cpp's ggml-vocab-*.gguf)")
      ->required();
  CLI::App* draft = train->add_subcommand("draft", "Train a draft model by distillation from a teacher (KL to its logits)");
  add_common(draft, false);
  draft->add_option("--teacher", a->job.teacher,
                    "Teacher (target) model: a GGUF file or a directory, any family; its tokenizer is used")
      ->required();

  CLI::App* ex = train->add_subcommand(
      "exits", "Train early-exit adapters of a target by distillation from its final layer (the target stays frozen)");
  ex->add_option("--target,--model", a->exits.target_dir, "Target model directory (its tokenizer encodes the corpus)")->required();
  ex->add_option("--layers", a->exits.layers, "all, or layer counts to exit after, e.g. 2,4,6")->capture_default_str();
  ex->add_option("--corpus", a->exits.corpus, "Training text")->required();
  ex->add_option("--valid", a->exits.valid, "Held-out text: match rates before and after are reported");
  ex->add_option("--out", a->exits.out_dir, "Directory for early_exits.json/.safetensors (default: the target's)");
  ex->add_option("--bottleneck", a->exits.bottleneck, "Adapter width")->capture_default_str()->check(CLI::PositiveNumber);
  ex->add_option("--steps", a->exits.steps, "Optimizer steps")->capture_default_str()->check(CLI::PositiveNumber);
  ex->add_option("--batch", a->exits.batch, "Windows per step")->capture_default_str()->check(CLI::PositiveNumber);
  ex->add_option("--seq-len", a->exits.seq_len, "Tokens per window")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  ex->add_option("--lr", a->exits.lr, "AdamW learning rate")->capture_default_str();
  ex->add_option("--seed", a->exits.seed, "Seed of initialisation and batches")->capture_default_str();
  ex->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores")->capture_default_str();

  CLI::App* rank = train->add_subcommand(
      "shortlist", "Rank the vocabulary by corpus frequency for the early exits' shortlist (train exits does this too)");
  rank->add_option("--target,--model", a->rank_target, "Target model directory with early_exits.json")->required();
  rank->add_option("--corpus", a->rank_corpus, "Text like what the target will generate")->required();

  CLI::App* lut = train->add_subcommand(
      "lut", "Warm-start DIAA's look-up tables: run the target over a text and record its top K after every token");
  lut->add_option("--target,--model", a->lut.target_dir, "Target model directory (its tokenizer encodes the text)")->required();
  lut->add_option("--corpus", a->lut.corpus, "Warm-up text (documents separated by blank lines)")->required();
  lut->add_option("--tokens", a->lut.tokens, "Tokens of the text to run")->capture_default_str()->check(CLI::Range(int64_t{2}, int64_t{1} << 40));
  lut->add_option("--out", a->lut.out, "Tables file (.safetensors; its .json sidecar goes beside it)")->required();
  lut->add_option("--k", a->lut.tables.k, "Candidates per row")->capture_default_str();
  lut->add_option("--order", a->lut.tables.order, "Longest key, in tokens (back-off to shorter ones)")->capture_default_str();
  lut->add_option("--slots", a->lut.tables.slots, "Hashed rows for keys of two tokens or more")->capture_default_str();
  lut->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores")->capture_default_str();

  RecurrentTrainJob& rj = a->recurrent;
  CLI::App* rec = train->add_subcommand(
      "recurrent",
      "Train ReDrafter's recurrent draft head on a frozen target, distilled from the target's own greedy continuations");
  rec->add_option("--target,--model", rj.target_dir, "Target model directory (frozen; its tokenizer encodes the corpus)")->required();
  rec->add_option("--corpus", rj.corpus, "Text whose openings the target continues (documents separated by blank lines)")
      ->required();
  rec->add_option("--out", rj.out_dir, "Directory for recurrent_drafter.safetensors/.json (default: the target's)");
  rec->add_flag("--resume", rj.resume, "Continue from the checkpoint in --out (the distillation data is kept for it)");
  rec->add_option("--embed-dim", rj.head.embed_dim, "The head's token embedding and recurrent state width")
      ->capture_default_str()->check(CLI::PositiveNumber);
  rec->add_option("--exit-dim", rj.head.exit_dim, "Width of the residual blocks")->capture_default_str()->check(CLI::PositiveNumber);
  rec->add_option("--blocks", rj.head.num_blocks, "Residual SiLU blocks")->capture_default_str()->check(CLI::Range(0, 16));
  rec->add_option("--rank", rj.head.rank, "Rank of the vocabulary projection; 0: full")->capture_default_str()->check(CLI::Range(0, 16384));
  rec->add_option("--continuations", rj.continuations, "Corpus openings the target continues (every tenth held out)")
      ->capture_default_str()->check(CLI::Range(int64_t{10}, int64_t{1} << 24));
  rec->add_option("--opening-tokens", rj.opening_tokens, "Tokens per opening")->capture_default_str()->check(CLI::PositiveNumber);
  rec->add_option("--new-tokens", rj.new_tokens, "Greedy tokens the target adds to each opening")
      ->capture_default_str()->check(CLI::PositiveNumber);
  rec->add_option("--predict", rj.predict, "Tokens ahead the loss covers")->capture_default_str()->check(CLI::Range(1, 64));
  rec->add_option("--steps", rj.steps, "Optimizer steps")->capture_default_str()->check(CLI::PositiveNumber);
  rec->add_option("--batch", rj.batch, "Positions per step")->capture_default_str()->check(CLI::PositiveNumber);
  rec->add_option("--lr", rj.lr, "AdamW peak learning rate (cosine to a tenth)")->capture_default_str()->check(CLI::PositiveNumber);
  rec->add_option("--seed", rj.seed, "Seed of openings, initialisation and batches")->capture_default_str();
  rec->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores")->capture_default_str();

  return {train, [a, tok, lm, draft, ex, rank, lut, rec]() {
            set_training_threads(a->threads);
            if (rec->parsed()) {
              const RecurrentTrainReport r = train_recurrent(a->recurrent);
              auto pct = [](const std::vector<double>& v) {
                std::string s;
                for (double x : v) s += (s.empty() ? "" : " / ") + fmt::format("{:.1f}%", 100 * x);
                return s;
              };
              std::printf("wrote %s/recurrent_drafter.safetensors: %zu bytes\n",
                          (a->recurrent.out_dir.empty() ? a->recurrent.target_dir : a->recurrent.out_dir).c_str(), r.head_bytes);
              std::printf("distilled %lld tokens (%lld training, %lld held-out positions) in %.1f s; %lld steps in %.1f s\n",
                          static_cast<long long>(r.distilled_tokens), static_cast<long long>(r.train_positions),
                          static_cast<long long>(r.held_out_positions), r.data_seconds, static_cast<long long>(r.steps),
                          r.train_seconds);
              std::printf("held-out top-1 by step ahead: %s (before: %s)\n", pct(r.accuracy).c_str(),
                          pct(r.initial_accuracy).c_str());
              return 0;
            }
            if (lut->parsed()) {
              const LutBuildReport r = build_lut(a->lut);
              std::printf("wrote %s: %lld positions, %lld rows used, %zu bytes, %.1f s\n", a->lut.out.c_str(),
                          static_cast<long long>(r.positions), static_cast<long long>(r.rows_used), r.bytes,
                          r.wall_seconds);
              return 0;
            }
            if (rank->parsed()) {
              const int64_t n = rank_exit_tokens(a->rank_target, a->rank_corpus);
              std::printf("ranked %lld tokens into %s/early_exits.json\n", static_cast<long long>(n), a->rank_target.c_str());
              return 0;
            }
            if (ex->parsed()) {
              const ExitTrainReport r = train_exits(a->exits);
              std::printf("| exit after layer | KL first step | KL last step | match before | match after | confidence after |\n");
              std::printf("|---|---|---|---|---|---|\n");
              for (size_t i = 0; i < r.last_losses.size(); ++i) {
                const bool eval = i < r.after.size();
                std::printf("| %lld | %.3f | %.3f | %s | %s | %s |\n",
                            static_cast<long long>(eval ? r.after[i].after_layer : static_cast<int64_t>(i)), r.first_losses[i],
                            r.last_losses[i], eval ? std::to_string(r.before[i].match_rate).c_str() : "-",
                            eval ? std::to_string(r.after[i].match_rate).c_str() : "-",
                            eval ? std::to_string(r.after[i].mean_confidence).c_str() : "-");
              }
              if (!r.kept_layers.empty())
                std::printf("kept the exits already there after layers %s\n",
                            fmt::format("{}", fmt::join(r.kept_layers, ",")).c_str());
              if (!r.note.empty()) std::printf("note: %s\n", r.note.c_str());
              std::printf("wall %.1f s\n", r.wall_seconds);
              return 0;
            }
            if (tok->parsed()) {
              train_tokenizer(a->tokenizer);
              std::cerr << "train: wrote " << a->tokenizer.out_dir << "/tokenizer.model\n";
              return 0;
            }
            a->job.config = a->config_path.empty() ? default_draft_config(load_model_config(a->job.teacher))
                                                   : load_train_config(a->config_path);
            const TrainReport r = run_training(a->job);
            std::cout << "{\"steps\": " << r.steps << ", \"valid_ppl\": " << r.valid_ppl
                      << ", \"wall_seconds\": " << r.wall_seconds << "}" << std::endl;
            return 0;
          }};
}

}  // namespace splitspec::cli

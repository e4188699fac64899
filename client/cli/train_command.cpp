#include <iostream>
#include <memory>

#include "client/cli/commands.h"
#include "common/error.h"
#include "common/threads.h"
#include "common/tokenizer.h"
#include "common/train/trainer.h"

namespace splitspec::cli {

namespace {

struct TrainArgs {
  TokenizerTrainOptions tokenizer;
  TrainJob job;
  std::string config_path;
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

  auto add_common = [&](CLI::App* cmd) {
    cmd->add_option("--config", a->config_path, "Training config: {\"model\": {...}, \"train\": {...}} (see configs/)")
        ->required();
    cmd->add_option("--corpus", a->job.corpus, "Training text (documents separated by blank lines)")->required();
    cmd->add_option("--valid", a->job.valid, "Validation text")->required();
    cmd->add_option("--out", a->job.out_dir, "Output model directory (Hugging Face layout)")->required();
    cmd->add_flag("--resume", a->job.resume, "Continue from the checkpoint in --out");
    cmd->add_option("--threads", a->threads, "Compute threads; 0 uses every core")->capture_default_str();
  };
  CLI::App* lm = train->add_subcommand("lm", "Train a LLaMA language model on a corpus");
  add_common(lm);
  lm->add_option("--tokenizer", a->job.tokenizer, "tokenizer.model (or its directory)")->required();
  CLI::App* draft = train->add_subcommand("draft", "Train a draft model by distillation from a teacher (KL to its logits)");
  add_common(draft);
  draft->add_option("--teacher", a->job.teacher, "Teacher (target) model directory; its tokenizer is used")->required();

  return {train, [a, tok, lm, draft]() {
            set_compute_threads(a->threads);
            if (tok->parsed()) {
              train_tokenizer(a->tokenizer);
              std::cerr << "train: wrote " << a->tokenizer.out_dir << "/tokenizer.model\n";
              return 0;
            }
            a->job.config = load_train_config(a->config_path);
            const TrainReport r = run_training(a->job);
            std::cout << "{\"steps\": " << r.steps << ", \"valid_ppl\": " << r.valid_ppl
                      << ", \"wall_seconds\": " << r.wall_seconds << "}" << std::endl;
            return 0;
          }};
}

}  // namespace splitspec::cli

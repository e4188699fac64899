#pragma once
// Language-model training and draft distillation for the LLaMA module:
// AdamW, linear warm-up then cosine decay, gradient clipping and
// accumulation, deterministic seeding, atomic resumable checkpoints,
// validation perplexity, and Hugging Face output the loader reads.
#include <cstdint>
#include <string>
#include <vector>

#include "common/kernels/weight_type.h"
#include "common/model/model_config.h"
#include "common/weights/safetensors.h"

namespace splitspec {

struct TrainSettings {
  int64_t seq_len = 256;
  int64_t batch_size = 16;
  int64_t grad_accum = 1;
  int64_t steps = 1000;
  int64_t warmup_steps = 50;
  double lr = 3e-3;
  double min_lr = 3e-4;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  uint64_t seed = 1234;
  int64_t eval_every = 250;       // 0: only at the end
  int64_t eval_windows = 32;      // validation windows per periodic evaluation
  int64_t checkpoint_every = 100;
  WType dtype = WType::F16;       // of the saved weights
};

struct TrainConfig {
  ModelConfig model;
  TrainSettings train;
};

// {"model": {config.json fields}, "train": {TrainSettings fields}}. Unknown
// keys are errors, so a typo cannot silently fall back to a default.
TrainConfig load_train_config(const std::string& path);

// A draft for `teacher` when no config is given: a 2-layer LLaMA of hidden
// size 256 (4 heads, 2 KV heads, MLP 768) with the teacher's vocabulary and
// special ids, its embedding tied to its head (with a large vocabulary the
// embedding is most of the draft: 32.8M of its 34.4M parameters at Llama
// 3's 128256 tokens), a context of min(teacher's, 2048); 500 steps of 4
// windows of 128 tokens.
TrainConfig default_draft_config(const ModelConfig& teacher);

struct TrainJob {
  TrainConfig config;
  std::string corpus;
  std::string valid;
  std::string out_dir;
  std::string tokenizer;  // a model directory, tokenizer.model or a GGUF vocabulary (default: the teacher's)
  std::string teacher;    // non-empty: distil from this model (a directory or a GGUF file, any family)
  std::string init;       // non-empty: start from this model's weights (same config) instead of a random init
  bool resume = false;
  int64_t stop_after = -1;  // end this run after so many steps, as a kill would (tests)
  bool progress = true;     // progress bar on stderr
};

struct TrainReport {
  int64_t steps = 0;                 // steps completed in total
  std::vector<double> losses;        // every step of this run
  double valid_ppl = 0;              // full validation set, at the end
  double wall_seconds = 0;
  bool finished = false;             // reached config steps and wrote the model
};

TrainReport run_training(const TrainJob& job);

}  // namespace splitspec

// Language-model and draft-model training. The training toolkit's
// translation units are the only ones that need LibTorch's C++ frontend
// (optimizer, gradient clipping, serialization); everything else stays on ATen.
#include "common/train/trainer.h"

#include <torch/types.h>  // clip_grad.h uses torch::Tensor without including it
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/serialize.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/train/checkpoint.h"
#include "common/train/corpus.h"
#include "common/train/model_weights.h"
#include "common/train/output_dir.h"
#include "common/train/perplexity.h"
#include "common/train/trainable_llama.h"
#include "common/util/error.h"
#include "common/convert/gguf_convert.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace splitspec {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

WType parse_out_dtype(const std::string& s, const std::string& source) {
  if (const auto t = parse_wtype(s); t && is_writable(*t)) return *t;
  throw Error(source + ": train.dtype must be F32, F16, BF16, Q8_0 or Q4_0, got '" + s + "'");
}

TrainSettings parse_settings(const json& j, const std::string& source) {
  TrainSettings t;
  if (!j.is_object()) throw Error(source + ": 'train' must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    auto num = [&]() {
      if (!it->is_number()) throw Error(source + ": train." + k + " must be a number");
      return it->get<double>();
    };
    auto integer = [&]() {
      if (!it->is_number_integer()) throw Error(source + ": train." + k + " must be an integer");
      return it->get<int64_t>();
    };
    if (k == "seq_len") t.seq_len = integer();
    else if (k == "batch_size") t.batch_size = integer();
    else if (k == "grad_accum") t.grad_accum = integer();
    else if (k == "steps") t.steps = integer();
    else if (k == "warmup_steps") t.warmup_steps = integer();
    else if (k == "lr") t.lr = num();
    else if (k == "min_lr") t.min_lr = num();
    else if (k == "weight_decay") t.weight_decay = num();
    else if (k == "grad_clip") t.grad_clip = num();
    else if (k == "seed") t.seed = static_cast<uint64_t>(integer());
    else if (k == "eval_every") t.eval_every = integer();
    else if (k == "eval_windows") t.eval_windows = integer();
    else if (k == "checkpoint_every") t.checkpoint_every = integer();
    else if (k == "dtype") t.dtype = parse_out_dtype(it->is_string() ? it->get<std::string>() : it->dump(), source);
    else throw Error(source + ": unknown setting train." + k);
  }
  auto positive = [&](int64_t v, const char* name) {
    if (v <= 0) throw Error(source + ": train." + name + " must be positive");
  };
  positive(t.seq_len, "seq_len");
  positive(t.batch_size, "batch_size");
  positive(t.grad_accum, "grad_accum");
  positive(t.steps, "steps");
  positive(t.checkpoint_every, "checkpoint_every");
  if (t.warmup_steps < 0 || t.warmup_steps > t.steps) throw Error(source + ": train.warmup_steps must be in [0, steps]");
  if (!(t.lr > 0) || !(t.min_lr >= 0) || t.min_lr > t.lr) throw Error(source + ": need 0 <= train.min_lr <= train.lr, lr > 0");
  if (!(t.grad_clip > 0)) throw Error(source + ": train.grad_clip must be positive");
  if (t.weight_decay < 0) throw Error(source + ": train.weight_decay must be >= 0");
  return t;
}

// Linear warm-up to lr, then cosine decay to min_lr at the last step.
double learning_rate(const TrainSettings& t, int64_t step) {
  if (step < t.warmup_steps) return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  const double span = std::max<int64_t>(1, t.steps - t.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - t.warmup_steps) / span);
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress));
}

std::string clock_str(double seconds) {
  char buf[32];
  const int s = static_cast<int>(std::max(0.0, seconds));
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

std::string config_fingerprint(const TrainJob& job) {
  std::ostringstream os;
  const TrainSettings& t = job.config.train;
  os << model_config_to_json(job.config.model) << t.seq_len << ',' << t.batch_size << ',' << t.grad_accum << ','
     << t.steps << ',' << t.warmup_steps << ',' << t.lr << ',' << t.min_lr << ',' << t.weight_decay << ','
     << t.grad_clip << ',' << t.seed << ',' << (job.teacher.empty() ? "lm" : "distill") << ",init=" << job.init;
  return os.str();
}

// The teacher's next-token log-probabilities at every position of each
// window [batch, time, vocab], each window a sequence of its own from
// position 0, as the draft sees it.
at::Tensor teacher_log_probs(const Model& teacher, const at::Tensor& inputs) {
  const at::Tensor windows = inputs.contiguous();
  const int64_t B = windows.size(0), T = windows.size(1);
  std::vector<at::Tensor> rows;
  rows.reserve(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* p = windows[b].data_ptr<int64_t>();
    ForwardRequest f;
    f.tokens.assign(p, p + T);
    KVCache cache = teacher.new_cache(T);
    rows.push_back(to_tensor(teacher.forward(f, cache).logits));
  }
  return at::log_softmax(at::stack(rows), -1);
}

}  // namespace

TrainConfig load_train_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open training config");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("model") || !j.contains("train"))
    throw Error(path + ": expected {\"model\": {...}, \"train\": {...}}");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "model" && it.key() != "train" && it.key() != "comment")
      throw Error(path + ": unknown top-level key '" + it.key() + "'");
  TrainConfig c;
  c.model = parse_model_config(j["model"].dump(), path + " (model)");
  c.train = parse_settings(j["train"], path);
  if (c.train.seq_len > c.model.max_position_embeddings)
    throw Error(path + ": train.seq_len " + std::to_string(c.train.seq_len) + " exceeds model.max_position_embeddings " +
                std::to_string(c.model.max_position_embeddings));
  return c;
}

TrainConfig default_draft_config(const ModelConfig& teacher) {
  TrainConfig c;
  ModelConfig& m = c.model;
  m.hidden_size = 256;
  m.intermediate_size = 768;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  m.head_dim = 64;
  m.vocab_size = teacher.vocab_size;
  m.rms_norm_eps = 1e-5;
  m.rope_theta = 10000.0;
  m.max_position_embeddings = std::min<int64_t>(teacher.max_position_embeddings, 2048);
  m.tie_word_embeddings = true;
  m.bos_token_id = teacher.bos_token_id;
  m.eos_token_id = teacher.eos_token_id;
  m.eos_token_ids = teacher.eos_token_ids;
  m.validate("the default draft config");
  TrainSettings& t = c.train;
  t.seq_len = std::min<int64_t>(128, m.max_position_embeddings);
  t.batch_size = 4;
  t.steps = 500;
  t.warmup_steps = 30;
  t.eval_every = 0;
  t.checkpoint_every = 100;
  return c;
}

TrainReport run_training(const TrainJob& job) {
  const auto t0 = Clock::now();
  const TrainSettings& ts = job.config.train;
  const ModelConfig& mc = job.config.model;

  // Everything that can be wrong with the inputs is checked before any work.
  check_trainable(mc);
  for (const auto& [what, path] : {std::pair<const char*, std::string>{"corpus", job.corpus}, {"validation text", job.valid}}) {
    if (!fs::is_regular_file(path)) throw Error(path + ": " + what + " file not found");
    if (fs::file_size(path) == 0) throw Error(path + ": " + what + " is empty");
  }
  prepare_output_dir(job.out_dir);
  // The teacher runs on the inference engine, as it serves: any family,
  // any weight type, a GGUF file or a directory.
  std::shared_ptr<Model> teacher;
  std::string tokenizer_path = job.tokenizer;
  if (!job.teacher.empty()) {
    teacher = Model::load(job.teacher);
    if (tokenizer_path.empty()) tokenizer_path = job.teacher;
    if (teacher->config().vocab_size != mc.vocab_size)
      throw Error("draft vocab_size " + std::to_string(mc.vocab_size) + " differs from the teacher's " +
                  std::to_string(teacher->config().vocab_size) + "; they must share one vocabulary");
  }
  std::shared_ptr<Model> init_model;
  if (!job.init.empty()) {
    init_model = Model::load(job.init);
    if (model_config_to_json(init_model->config()) != model_config_to_json(mc))
      throw Error(job.init + ": --init model's config differs from the training config's model; they must be the same");
  }
  if (tokenizer_path.empty()) throw Error("train: --tokenizer is required");
  if (!tokenizer_available(tokenizer_path)) throw Error(tokenizer_path + ": no tokenizer found");
  Tokenizer tok(tokenizer_path);
  if (tok.vocab_size() > mc.vocab_size)
    throw Error("config vocab_size " + std::to_string(mc.vocab_size) + " is smaller than the tokenizer's " +
                std::to_string(tok.vocab_size()) + " pieces");

  const std::vector<int32_t> train_tokens = tokenize_corpus(job.corpus, tok, static_cast<int32_t>(mc.bos_token_id));
  const std::vector<int32_t> valid_tokens = tokenize_corpus(job.valid, tok, static_cast<int32_t>(mc.bos_token_id));
  const WindowSampler sampler(train_tokens, ts.seq_len);
  WindowSampler(valid_tokens, ts.seq_len);  // validates that one window fits
  if (job.progress)
    std::fprintf(stderr, "train: %zu training tokens, %zu validation tokens, %lld parameters%s\n", train_tokens.size(),
                 valid_tokens.size(), static_cast<long long>(mc.num_parameters()),
                 job.teacher.empty() ? "" : (", distilling from " + job.teacher).c_str());

  at::manual_seed(ts.seed);
  TrainableLlama model = init_model ? TrainableLlama(*init_model) : TrainableLlama(mc, ts.seed);
  init_model.reset();
  // Decay matrices only; norm gains stay undecayed.
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(ts.lr).betas({0.9, 0.95}).weight_decay(ts.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(ts.lr).betas({0.9, 0.95}).weight_decay(0.0)));
  torch::optim::AdamW opt(std::move(groups));
  std::vector<at::Tensor> params = model.parameters();

  const Checkpoint ckpt{fs::path(job.out_dir) / "checkpoint"};
  const std::string fingerprint = config_fingerprint(job);
  int64_t step = 0;
  if (ckpt.exists()) {
    if (!job.resume)
      throw Error(job.out_dir + " holds a checkpoint of an earlier run; pass --resume to continue it or choose a new --out");
    step = ckpt.load(params, opt, fingerprint);
    if (job.progress) std::fprintf(stderr, "train: resumed at step %lld\n", static_cast<long long>(step));
  }

  TrainReport report;
  const int64_t tokens_per_step = ts.batch_size * ts.grad_accum * ts.seq_len;
  const auto run_start = Clock::now();
  const int64_t first_step = step;
  auto eval_ppl = [&](int64_t windows) {
    return perplexity(*model_from_weights(mc, model.weights(), "training"), valid_tokens, ts.seq_len, windows);
  };

  while (step < ts.steps) {
    if (job.stop_after >= 0 && step - first_step >= job.stop_after) return report;  // simulated kill
    const double lr = learning_rate(ts, step);
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    opt.zero_grad();
    double loss_sum = 0.0;
    for (int64_t micro = 0; micro < ts.grad_accum; ++micro) {
      std::vector<int64_t> batch = sampler.random_batch(ts.seed, step * ts.grad_accum + micro, ts.batch_size);
      const at::Tensor windows = at::from_blob(batch.data(), {ts.batch_size, ts.seq_len + 1}, at::kLong).clone();
      const at::Tensor inputs = windows.narrow(1, 0, ts.seq_len);
      const at::Tensor logits = model.forward(inputs);
      at::Tensor loss;
      if (teacher) {
        // KL(teacher || draft) per position: the draft learns the teacher's
        // whole next-token distribution (ReDrafter section 3.5), which is
        // what acceptance depends on, rather than the corpus's one token.
        const at::Tensor target_logp = teacher_log_probs(*teacher, inputs);
        const at::Tensor logp = at::log_softmax(logits, -1);
        loss = (target_logp.exp() * (target_logp - logp)).sum(-1).mean();
      } else {
        const at::Tensor targets = windows.narrow(1, 1, ts.seq_len);
        loss = at::cross_entropy_loss(logits.reshape({-1, mc.vocab_size}), targets.reshape({-1}));
      }
      (loss / static_cast<double>(ts.grad_accum)).backward();
      loss_sum += loss.item<double>();
    }
    torch::nn::utils::clip_grad_norm_(params, ts.grad_clip);
    opt.step();
    ++step;
    const double loss = loss_sum / static_cast<double>(ts.grad_accum);
    report.losses.push_back(loss);
    if (!std::isfinite(loss)) throw Error("train: loss became " + std::to_string(loss) + " at step " + std::to_string(step) + "; lower train.lr");

    if (job.progress) {
      const double elapsed = seconds_since(run_start);
      const double per_step = elapsed / static_cast<double>(step - first_step);
      std::fprintf(stderr, "\r[%lld/%lld] %s %s | lr %.2e | %.0f tok/s | elapsed %s | ETA %s   ",
                   static_cast<long long>(step), static_cast<long long>(ts.steps), teacher ? "kl" : "loss",
                   (std::to_string(loss).substr(0, 6)).c_str(), lr, tokens_per_step / per_step, clock_str(elapsed).c_str(),
                   clock_str(per_step * static_cast<double>(ts.steps - step)).c_str());
      std::fflush(stderr);
    }
    if (step % ts.checkpoint_every == 0 || step == ts.steps) ckpt.save(params, opt, step, fingerprint);
    if (ts.eval_every > 0 && step % ts.eval_every == 0 && step < ts.steps) {
      const double ppl = eval_ppl(ts.eval_windows);
      if (job.progress) std::fprintf(stderr, "\n[%lld] validation perplexity %.2f (%lld windows)\n", static_cast<long long>(step), ppl, static_cast<long long>(ts.eval_windows));
    }
  }
  if (job.progress) std::fprintf(stderr, "\n");

  save_model(mc, model.weights(), job.out_dir, ts.dtype);
  // The tokenizer's files beside the model, checked to keep the fingerprint,
  // so a draft pairs with its teacher in any form.
  copy_vocabulary(tokenizer_path, mc.vocab_size, job.out_dir);
  // Perplexity of what was written (after the dtype conversion), on the whole validation set.
  report.valid_ppl = perplexity(*Model::load(job.out_dir), valid_tokens, ts.seq_len);
  report.steps = step;
  report.wall_seconds = seconds_since(t0);
  report.finished = true;
  std::ofstream(fs::path(job.out_dir) / "training_log.json")
      << json{{"steps", step},
              {"valid_ppl", report.valid_ppl},
              {"wall_seconds_last_run", report.wall_seconds},
              {"tokens_per_step", tokens_per_step},
              {"mode", teacher ? "distill" : "lm"},
              {"final_loss", report.losses.empty() ? 0.0 : report.losses.back()}}
             .dump(2)
      << "\n";
  if (job.progress) std::fprintf(stderr, "train: done, validation perplexity %.2f\n", report.valid_ppl);
  return report;
}

}  // namespace splitspec

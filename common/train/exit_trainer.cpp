#include "common/train/exit_trainer.h"

#include <torch/optim/adamw.h>

#include <c10/core/InferenceMode.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/backend/cpu_backend.h"
#include "common/model/model.h"
#include "common/model/model_config.h"
#include "common/model/shortlist.h"
#include "common/tokenizer/tokenizer.h"
#include "common/train/corpus.h"
#include "common/train/model_weights.h"
#include "common/util/error.h"
#include "common/train/output_dir.h"

namespace splitspec {

namespace {

// Tokens ranked for the shortlist: a shortlist pays only well below the
// vocabulary, so more would only lengthen early_exits.json.
constexpr int64_t kRankedTokens = 4096;

void rank_tokens(EarlyExits& exits, const std::vector<int32_t>& corpus_tokens, const ModelConfig& c) {
  exits.set_frequent_tokens(tokens_by_frequency(corpus_tokens, c.vocab_size, kRankedTokens), c.vocab_size);
}

using Clock = std::chrono::steady_clock;

// The frozen model's hidden states after each exit layer and its final
// log-probabilities, for a batch of windows.
struct Teacher {
  std::vector<at::Tensor> hidden;  // per exit: [rows, hidden]
  at::Tensor log_probs;            // [rows, vocab]
};

Teacher teach(const Model& model, const EarlyExits& exits, const std::vector<int64_t>& batch, int64_t n_windows,
              int64_t seq_len) {
  c10::InferenceMode guard;
  ForwardRequest r;
  for (const ExitAdapter& a : exits.adapters()) r.hidden_layers.push_back(a.after_layer - 1);
  std::vector<std::vector<at::Tensor>> hidden(exits.adapters().size());
  std::vector<at::Tensor> logits;
  for (int64_t b = 0; b < n_windows; ++b) {
    const int64_t* w = batch.data() + b * (seq_len + 1);
    r.tokens.assign(w, w + seq_len);
    KVCache cache = model.new_cache(seq_len);
    ForwardResult out = model.forward(r, cache);
    for (size_t i = 0; i < hidden.size(); ++i)
      hidden[i].push_back(to_tensor(out.hidden.at(exits.adapters()[i].after_layer - 1)));
    logits.push_back(to_tensor(out.logits));
  }
  Teacher t;
  for (auto& h : hidden) t.hidden.push_back(at::cat(h));
  t.log_probs = at::log_softmax(at::cat(logits), -1);
  return t;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// An adapter's weights as tensors ([hidden], [bottleneck, hidden],
// [hidden, bottleneck]) and back.
std::vector<at::Tensor> adapter_tensors(const ExitAdapter& a, int64_t bottleneck) {
  const int64_t H = static_cast<int64_t>(a.norm.size());
  auto t = [](const std::vector<float>& v, std::vector<int64_t> shape) {
    return at::from_blob(const_cast<float*>(v.data()), shape, at::kFloat).clone();
  };
  return {t(a.norm, {H}), t(a.down, {bottleneck, H}), t(a.up, {H, bottleneck})};
}

std::vector<float> values(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

}  // namespace

EarlyExits init_exits(const ModelConfig& c, const std::vector<int64_t>& after_layers, int64_t bottleneck, uint64_t seed) {
  if (bottleneck < 1) throw Error("exit bottleneck must be at least 1");
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  std::vector<ExitAdapter> adapters;
  for (int64_t l : after_layers) {
    ExitAdapter a;
    a.after_layer = l;
    a.norm.assign(static_cast<size_t>(c.hidden_size), 1.0f);
    a.down = values(
        at::normal(0.0, 1.0 / std::sqrt(static_cast<double>(c.hidden_size)), {bottleneck, c.hidden_size}, gen, f32));
    a.up.assign(static_cast<size_t>(c.hidden_size * bottleneck), 0.0f);
    adapters.push_back(std::move(a));
  }
  return EarlyExits(std::move(adapters), bottleneck);
}

int64_t rank_exit_tokens(const std::string& target_dir, const std::string& corpus) {
  // The config alone: ranking reads no weights.
  const ModelConfig c = load_model_config(target_dir);
  std::optional<EarlyExits> exits = EarlyExits::load(model_side_dir(target_dir), c);
  if (!exits) throw Error(target_dir + ": no early_exits.json (train them with splitspec train exits)");
  rank_tokens(*exits, tokenize_corpus(corpus, Tokenizer(target_dir), static_cast<int32_t>(c.bos_token_id)), c);
  exits->save(model_side_dir(target_dir));
  return static_cast<int64_t>(exits->frequent_tokens().size());
}

ExitTrainReport train_exits(const ExitTrainJob& job) {
  namespace fs = std::filesystem;
  const auto t0 = Clock::now();
  if (job.steps < 1 || job.batch < 1 || job.seq_len < 2) throw Error("train exits: steps, batch and seq-len must be positive");
  auto model = Model::load(job.target_dir);
  const ModelConfig& c = model->config();
  const std::string out_dir = job.out_dir.empty() ? model_side_dir(job.target_dir) : job.out_dir;
  prepare_output_dir(out_dir);
  EarlyExits exits = init_exits(c, EarlyExits::parse_layers(job.layers, c), job.bottleneck, job.seed);
  ExitTrainReport report;
  // Read now, so that a file that cannot be kept is known before training.
  std::optional<EarlyExits> older;
  try {
    older = EarlyExits::load(out_dir, c);
  } catch (const Error& e) {
    report.note = std::string("the exits already there are replaced: ") + e.what();
  }
  if (older && older->bottleneck() != job.bottleneck) {
    report.note = "the exits already there (bottleneck " + std::to_string(older->bottleneck()) + ") are replaced";
    older.reset();
  }
  Tokenizer tok(job.target_dir);
  const std::vector<int32_t> train_tokens = tokenize_corpus(job.corpus, tok, static_cast<int32_t>(c.bos_token_id));
  const WindowSampler sampler(train_tokens, job.seq_len);
  std::vector<int32_t> valid_tokens;
  if (!job.valid.empty()) valid_tokens = tokenize_corpus(job.valid, tok, static_cast<int32_t>(c.bos_token_id));
  constexpr int64_t kEvalWindows = 24;
  if (!valid_tokens.empty()) report.before = evaluate_exits(CpuBackend(*model), exits, valid_tokens, job.seq_len, kEvalWindows);

  // Per exit: norm, down, up, trained as tensors and written back at the end.
  std::vector<std::vector<at::Tensor>> weights;
  std::vector<at::Tensor> params;
  for (const ExitAdapter& a : exits.adapters()) {
    weights.push_back(adapter_tensors(a, job.bottleneck));
    for (at::Tensor& t : weights.back()) {
      t.set_requires_grad(true);
      params.push_back(t);
    }
  }
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(job.lr).weight_decay(0.0));
  // Outside inference mode, so autograd may save them for the backward pass.
  const ModelWeights frozen = float_weights(*model);
  const at::Tensor final_norm = frozen.final_norm.clone(), lm_head = frozen.lm_head.clone();
  const size_t n = exits.adapters().size();
  report.first_losses.assign(n, 0.0);
  report.last_losses.assign(n, 0.0);
  for (int64_t step = 0; step < job.steps; ++step) {
    const Teacher t = teach(*model, exits, sampler.random_batch(job.seed, step, job.batch), job.batch, job.seq_len);
    const at::Tensor log_p = t.log_probs.clone(), p = log_p.exp();
    opt.zero_grad();
    at::Tensor total = at::zeros({}, at::TensorOptions().dtype(at::kFloat));
    std::vector<double> losses(n);
    // The losses only share the frozen model, so summing them still updates
    // each adapter by its own loss alone.
    for (size_t i = 0; i < n; ++i) {
      const at::Tensor &norm = weights[i][0], &down = weights[i][1], &up = weights[i][2];
      const at::Tensor x = t.hidden[i].clone();
      const at::Tensor h = x + at::matmul(at::silu(at::matmul(rms_norm(x, norm, c.rms_norm_eps), down.t())), up.t());
      const at::Tensor logq = at::log_softmax(at::matmul(rms_norm(h, final_norm, c.rms_norm_eps), lm_head.t()), -1);
      const at::Tensor kl = (p * (log_p - logq)).sum(-1).mean();
      losses[i] = kl.item<double>();
      total = total + kl;
    }
    total.backward();
    opt.step();
    for (size_t i = 0; i < n; ++i) {
      if (step == 0) report.first_losses[i] = losses[i];
      report.last_losses[i] = losses[i];
    }
    if (job.progress) {
      std::fprintf(stderr, "\rtrain exits: step %lld/%lld, KL", static_cast<long long>(step + 1), static_cast<long long>(job.steps));
      for (double l : losses) std::fprintf(stderr, " %.3f", l);
      std::fflush(stderr);
    }
  }
  if (job.progress) std::fprintf(stderr, "\n");
  for (size_t i = 0; i < n; ++i) {
    ExitAdapter& a = exits.adapters()[i];
    a.norm = values(weights[i][0]);
    a.down = values(weights[i][1]);
    a.up = values(weights[i][2]);
  }
  rank_tokens(exits, train_tokens, c);
  if (!valid_tokens.empty()) report.after = evaluate_exits(CpuBackend(*model), exits, valid_tokens, job.seq_len, kEvalWindows);
  if (older) report.kept_layers = exits.keep_missing_from(*older);
  exits.save(out_dir);
  report.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

}  // namespace splitspec

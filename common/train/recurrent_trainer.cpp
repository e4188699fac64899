#include "common/train/recurrent_trainer.h"

#include <torch/types.h>  // clip_grad.h uses torch::Tensor without including it
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/serialize.h>

#include <c10/core/InferenceMode.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/decoding/sampling.h"
#include "common/kernels/kernels.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/train/checkpoint.h"
#include "common/train/corpus.h"
#include "common/util/error.h"
#include "common/train/output_dir.h"

namespace splitspec {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Training examples: the target's hidden state at a position, the `predict`
// tokens the head reads (the target's token there, then its own drafts'
// places) and the `predict` tokens it must name.
struct Examples {
  at::Tensor hidden;  // [n, H], through half precision as the drafter reads it
  at::Tensor inputs;  // [n, predict] long
  at::Tensor labels;  // [n, predict] long
};

struct Distilled {
  Examples train, held_out;
  int64_t tokens = 0;  // generated
};

// Continues corpus openings greedily with the target, keeping the hidden
// state that produced each generated token.
Distilled distill(const Model& target, const std::vector<int32_t>& corpus, const RecurrentTrainJob& job) {
  c10::InferenceMode guard;
  const ModelConfig& c = target.config();
  const int64_t H = c.hidden_size, P = job.opening_tokens, K = job.predict;
  std::mt19937_64 gen(job.seed);
  std::uniform_int_distribution<size_t> start(0, corpus.size() - static_cast<size_t>(P));
  std::vector<float> hidden[2];
  std::vector<int64_t> inputs[2], labels[2];
  Distilled out;
  const auto t0 = Clock::now();
  for (int64_t n = 0; n < job.continuations; ++n) {
    const size_t s = start(gen);
    std::vector<int32_t> seq(corpus.begin() + static_cast<std::ptrdiff_t>(s),
                             corpus.begin() + static_cast<std::ptrdiff_t>(s) + P);
    std::vector<float> rows;  // row j: the hidden state at position P - 1 + j
    KVCache cache = target.new_cache(P + job.new_tokens);
    ForwardRequest r;
    r.tokens = seq;
    r.final_hidden = true;
    for (int64_t g = 0; g < job.new_tokens; ++g) {
      r.logits_rows = std::vector<int64_t>{static_cast<int64_t>(r.tokens.size()) - 1};
      const ForwardResult f = target.forward(r, cache);
      rows.insert(rows.end(), f.final_hidden.row(0), f.final_hidden.row(0) + H);
      const int32_t next = greedy_token(f.logits.row(0), f.logits.cols());
      seq.push_back(next);
      if (next == c.eos_token_id) break;
      r.tokens = {next};
    }
    out.tokens += static_cast<int64_t>(seq.size()) - P;
    const int64_t generated = static_cast<int64_t>(seq.size()) - P;
    const int part = n % 10 == 9 ? 1 : 0;
    // Position t = P - 1 + j: the head reads seq[t+1 .. t+K] and names seq[t+2 .. t+K+1].
    for (int64_t j = 0; j + K + 1 <= generated; ++j) {
      const int64_t t = P - 1 + j;
      hidden[part].insert(hidden[part].end(), rows.begin() + j * H, rows.begin() + (j + 1) * H);
      for (int64_t k = 0; k < K; ++k) {
        inputs[part].push_back(seq[t + 1 + k]);
        labels[part].push_back(seq[t + 2 + k]);
      }
    }
    if (job.progress && (n + 1 == job.continuations || n % 16 == 0)) {
      const double el = seconds_since(t0);
      std::fprintf(stderr, "\rtrain recurrent: distilling %lld/%lld continuations | %lld tokens | %.0f s, ETA %.0f s   ",
                   static_cast<long long>(n + 1), static_cast<long long>(job.continuations),
                   static_cast<long long>(out.tokens), el, el / static_cast<double>(n + 1) * static_cast<double>(job.continuations - n - 1));
      std::fflush(stderr);
    }
  }
  if (job.progress) std::fprintf(stderr, "\n");
  for (int part = 0; part < 2; ++part) {
    Examples& e = part ? out.held_out : out.train;
    const int64_t n = static_cast<int64_t>(inputs[part].size()) / K;
    // The drafter reads the hidden state through half precision (a server
    // sends it so); train on what it will see.
    std::vector<uint16_t> half(hidden[part].size());
    kernels::float_to_half(hidden[part].data(), static_cast<int64_t>(half.size()), half.data());
    kernels::half_to_float(half.data(), static_cast<int64_t>(half.size()), hidden[part].data());
    e.hidden = at::from_blob(hidden[part].data(), {n, H}, at::kFloat).clone();
    e.inputs = at::from_blob(inputs[part].data(), {n, K}, at::kLong).clone();
    e.labels = at::from_blob(labels[part].data(), {n, K}, at::kLong).clone();
  }
  return out;
}

// The head's forward in ATen, step for step what RecurrentHead computes:
// logits [n, vocab] for each of the K steps.
std::vector<at::Tensor> head_forward(const RecurrentHeadConfig& c, const std::vector<at::Tensor>& p,
                                     const at::Tensor& hidden, const at::Tensor& inputs) {
  const at::Tensor &embed = p[0], &rnn_w = p[1], &rnn_u = p[2], &rnn_b = p[3], &in_w = p[4], &in_b = p[5];
  std::vector<at::Tensor> out;
  at::Tensor s;
  for (int64_t k = 0; k < inputs.size(1); ++k) {
    at::Tensor pre = at::matmul(at::embedding(embed, inputs.select(1, k)), rnn_w.t());
    if (k > 0) pre = pre + at::matmul(s, rnn_u.t());
    s = at::silu(pre + rnn_b);
    at::Tensor z = at::matmul(at::cat({hidden, s}, 1), in_w.t()) + in_b;
    for (int64_t b = 0; b < c.num_blocks; ++b) z = z + at::silu(at::matmul(z, p[6 + 2 * b].t()) + p[7 + 2 * b]);
    const size_t v = 6 + 2 * static_cast<size_t>(c.num_blocks);
    out.push_back(c.rank > 0 ? at::matmul(at::matmul(z, p[v].t()), p[v + 1].t()) : at::matmul(z, p[v].t()));
  }
  return out;
}

// Top-1 accuracy per step ahead, teacher-forced, on `e`.
std::vector<double> accuracy(const RecurrentHeadConfig& c, const std::vector<at::Tensor>& p, const Examples& e) {
  at::NoGradGuard no_grad;
  const int64_t n = e.inputs.size(0), K = e.inputs.size(1), chunk = 2048;
  std::vector<double> hits(static_cast<size_t>(K), 0.0);
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t m = std::min(chunk, n - i);
    const std::vector<at::Tensor> logits = head_forward(c, p, e.hidden.narrow(0, i, m), e.inputs.narrow(0, i, m));
    for (int64_t k = 0; k < K; ++k)
      hits[k] += logits[k].argmax(1).eq(e.labels.narrow(0, i, m).select(1, k)).sum().item<double>();
  }
  for (double& h : hits) h = n > 0 ? h / static_cast<double>(n) : 0.0;
  return hits;
}

std::string fingerprint(const RecurrentTrainJob& j) {
  std::ostringstream os;
  const RecurrentHeadConfig& c = j.head;
  os << "recurrent," << c.hidden_size << ',' << c.vocab_size << ',' << c.embed_dim << ',' << c.exit_dim << ','
     << c.num_blocks << ',' << c.rank << ',' << j.continuations << ',' << j.opening_tokens << ',' << j.new_tokens << ','
     << j.predict << ',' << j.steps << ',' << j.batch << ',' << j.lr << ',' << j.seed;
  return os.str();
}

double learning_rate(const RecurrentTrainJob& j, int64_t step) {
  const int64_t warmup = std::min<int64_t>(100, j.steps / 10);
  if (step < warmup) return j.lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double t = static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, j.steps - warmup));
  return j.lr * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(M_PI * t)));
}

}  // namespace

RecurrentTrainReport train_recurrent(const RecurrentTrainJob& job_in) {
  RecurrentTrainJob job = job_in;
  if (job.continuations < 10 || job.opening_tokens < 1 || job.new_tokens < 2 || job.predict < 1 || job.steps < 1 ||
      job.batch < 1 || !(job.lr > 0) || job.checkpoint_every < 1)
    throw Error("train recurrent: continuations (at least 10), opening and new tokens, predict, steps, batch, lr and "
                "checkpoint interval must be positive");
  if (job.new_tokens <= job.predict)
    throw Error("train recurrent: new tokens (" + std::to_string(job.new_tokens) + ") must exceed predict (" +
                std::to_string(job.predict) + ")");
  const auto t0 = Clock::now();
  auto target = Model::load(job.target_dir);
  const ModelConfig& mc = target->config();
  if (job.opening_tokens + job.new_tokens > mc.max_position_embeddings)
    throw Error("train recurrent: an opening and its continuation (" + std::to_string(job.opening_tokens + job.new_tokens) +
                " tokens) exceed the target's context of " + std::to_string(mc.max_position_embeddings));
  job.head.hidden_size = mc.hidden_size;
  job.head.vocab_size = mc.vocab_size;
  job.head.validate();
  const std::string out_dir = job.out_dir.empty() ? model_side_dir(job.target_dir) : job.out_dir;
  std::error_code ec;
  prepare_output_dir(out_dir);
  if (!tokenizer_available(job.target_dir))
    throw Error(job.target_dir + ": no tokenizer (the corpus is encoded with the target's tokenizer)");
  Tokenizer tok(job.target_dir);
  job.head.tokenizer_fingerprint = tok.fingerprint();

  const Checkpoint ckpt{fs::path(out_dir) / "checkpoint-recurrent"};
  const fs::path data_file = fs::path(out_dir) / "checkpoint-recurrent-data.pt";
  const std::string print = fingerprint(job);
  const int64_t data_print = static_cast<int64_t>(std::hash<std::string>{}(print));
  if (ckpt.exists() && !job.resume)
    throw Error(out_dir + " holds a recurrent head checkpoint of an earlier run; pass --resume to continue it or "
                          "choose another --out");

  RecurrentTrainReport report;
  Distilled data;
  if (job.resume && fs::exists(data_file)) {
    std::vector<at::Tensor> t;
    torch::load(t, data_file.string());
    // Data of another job (other openings, predict or target) would train
    // silently on the wrong examples.
    if (t.size() != 8 || t[7].item<int64_t>() != data_print || t[0].size(1) != job.head.hidden_size ||
        t[1].size(1) != job.predict)
      throw Error(data_file.string() + ": distillation data of another train recurrent job; delete it (and " +
                  ckpt.dir.string() + ") or choose another --out");
    data.train = {t[0], t[1], t[2]};
    data.held_out = {t[3], t[4], t[5]};
    data.tokens = t[6].item<int64_t>();
    if (job.progress) std::fprintf(stderr, "train recurrent: distillation data from %s\n", data_file.c_str());
  } else {
    const std::vector<int32_t> corpus =
        tokenize_corpus(job.corpus, tok, static_cast<int32_t>(mc.bos_token_id),
                        std::max<int64_t>(1 << 20, 64 * job.continuations * job.opening_tokens));
    if (static_cast<int64_t>(corpus.size()) < job.opening_tokens)
      throw Error(job.corpus + ": " + std::to_string(corpus.size()) + " tokens, fewer than one opening of " +
                  std::to_string(job.opening_tokens));
    const auto d0 = Clock::now();
    data = distill(*target, corpus, job);
    report.data_seconds = seconds_since(d0);
    torch::save(std::vector<at::Tensor>{data.train.hidden, data.train.inputs, data.train.labels, data.held_out.hidden,
                                        data.held_out.inputs, data.held_out.labels, at::scalar_tensor(data.tokens, at::kLong),
                                        at::scalar_tensor(data_print, at::kLong)},
                data_file.string());
  }
  target.reset();
  report.train_positions = data.train.inputs.size(0);
  report.held_out_positions = data.held_out.inputs.size(0);
  report.distilled_tokens = data.tokens;
  if (report.train_positions < 1) throw Error("train recurrent: the continuations left no training positions");

  // PyTorch's default initialisations: N(0, 1) embeddings, U(+-1/sqrt(fan_in)) matrices, zero biases.
  std::vector<at::Tensor> params;
  {
    at::manual_seed(job.seed);
    for (const HeadParam& hp : recurrent_head_params(job.head)) {
      at::Tensor t = hp.name == "embed"      ? at::randn(hp.shape)
                     : hp.shape.size() == 1 ? at::zeros(hp.shape)
                                            : (at::rand(hp.shape) * 2 - 1) / std::sqrt(static_cast<double>(hp.shape[1]));
      params.push_back(t.set_requires_grad(true));
    }
  }
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(job.lr).betas({0.9, 0.95}).weight_decay(0.0));
  int64_t step = 0;
  if (job.resume && ckpt.exists()) {
    step = ckpt.load(params, opt, print);
    if (job.progress) std::fprintf(stderr, "train recurrent: resumed at step %lld\n", static_cast<long long>(step));
  }
  report.initial_accuracy = accuracy(job.head, params, data.held_out);

  const auto tt = Clock::now();
  const int64_t first = step, n = report.train_positions;
  while (step < job.steps) {
    if (job.stop_after >= 0 && step - first >= job.stop_after) {
      report.steps = step;
      return report;
    }
    for (auto& g : opt.param_groups())
      static_cast<torch::optim::AdamWOptions&>(g.options()).lr(learning_rate(job, step));
    // A pure function of (seed, step): a resumed run sees the batches the uninterrupted one would.
    at::Generator gen = at::detail::createCPUGenerator(job.seed * 1000003ull + static_cast<uint64_t>(step));
    const at::Tensor idx = at::randint(n, {job.batch}, gen, at::TensorOptions().dtype(at::kLong));
    const std::vector<at::Tensor> logits =
        head_forward(job.head, params, data.train.hidden.index_select(0, idx), data.train.inputs.index_select(0, idx));
    const at::Tensor labels = data.train.labels.index_select(0, idx);
    at::Tensor loss = at::zeros({});
    for (size_t k = 0; k < logits.size(); ++k) loss = loss + at::cross_entropy_loss(logits[k], labels.select(1, static_cast<int64_t>(k)));
    loss = loss / static_cast<double>(logits.size());
    opt.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(params, 1.0);
    opt.step();
    ++step;
    const double l = loss.item<double>();
    if (!std::isfinite(l)) throw Error("train recurrent: loss became " + std::to_string(l) + " at step " + std::to_string(step) + "; lower --lr");
    if (job.progress && (step == job.steps || step % 10 == 0)) {
      const double el = seconds_since(tt), per = el / static_cast<double>(step - first);
      std::fprintf(stderr, "\r[%lld/%lld] loss %.4f | lr %.2e | elapsed %.0f s | ETA %.0f s   ", static_cast<long long>(step),
                   static_cast<long long>(job.steps), l, learning_rate(job, step - 1), el,
                   per * static_cast<double>(job.steps - step));
      std::fflush(stderr);
    }
    if (step % job.checkpoint_every == 0 || step == job.steps) ckpt.save(params, opt, step, print);
  }
  if (job.progress) std::fprintf(stderr, "\n");
  report.train_seconds = seconds_since(tt);
  report.accuracy = accuracy(job.head, params, data.held_out);
  report.steps = step;
  report.finished = true;

  std::vector<std::vector<float>> values;
  for (const at::Tensor& p : params) {
    const at::Tensor t = p.detach().contiguous();
    values.emplace_back(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  }
  const RecurrentHead head = RecurrentHead::from_floats(job.head, values);
  report.head_bytes = head.weight_bytes();
  const nlohmann::json training = {{"labels", "the target's greedy continuations of corpus openings"},
                                   {"continuations", job.continuations},
                                   {"opening_tokens", job.opening_tokens},
                                   {"new_tokens", job.new_tokens},
                                   {"distilled_tokens", data.tokens},
                                   {"train_positions", report.train_positions},
                                   {"held_out_positions", report.held_out_positions},
                                   {"predict", job.predict},
                                   {"steps", step},
                                   {"batch", job.batch},
                                   {"lr", job.lr},
                                   {"seed", job.seed},
                                   {"held_out_top1_per_step", report.accuracy},
                                   {"data_seconds_last_run", report.data_seconds},
                                   {"train_seconds_last_run", report.train_seconds},
                                   {"wall_seconds_last_run", seconds_since(t0)}};
  head.save(out_dir, training.dump());
  fs::remove(data_file, ec);  // the checkpoint stays, small; the data is only for resuming
  return report;
}

}  // namespace splitspec

#include "common/train/trainable_llama.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>

#include "common/model/family.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * w;
}

// x: [B, heads, T, D]; cos/sin: [T, D/2].
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

// The engine's RoPE tables (model.h), as tensors [max_positions, head_dim/2].
void rope_tensors(const ModelConfig& c, at::Tensor& cos, at::Tensor& sin) {
  std::vector<float> cv, sv;
  rope_tables(c, cv, sv);
  const int64_t half = c.head_dim / 2;
  cos = at::from_blob(cv.data(), {c.max_position_embeddings, half}, at::kFloat).clone();
  sin = at::from_blob(sv.data(), {c.max_position_embeddings, half}, at::kFloat).clone();
}

}  // namespace

void check_trainable(const ModelConfig& c) {
  std::string other;
  if (!family_of(c).trainable) other = "the " + c.architecture + " architecture";
  else if (c.attention_bias) other = "attention biases";
  else if (c.qk_norm) other = "query/key norms";
  else if (c.activation != Activation::kSilu || c.post_norms || c.scale_embeddings) other = "Gemma's layers";
  else if (c.sliding_window > 0) other = "a sliding window";
  else if (c.rotary_dim > 0 && c.rotary_dim != c.head_dim) other = "partial rotary embeddings";
  if (!other.empty())
    throw Error("train: the training module trains LLaMA models (\"architectures\": [\"LlamaForCausalLM\"]), not " + other +
                "; a draft of any vocabulary is a LLaMA model, and a teacher of any family distils into it");
}

TrainableLlama::TrainableLlama(const ModelConfig& c, uint64_t seed) : config_(c) {
  c.validate("model config");
  check_trainable(c);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto normal = [&](std::vector<int64_t> shape) {
    return at::normal(0.0, 0.02, shape, gen, at::TensorOptions().dtype(at::kFloat));
  };
  // Residual projections scaled down with depth (GPT-2's rule), which keeps
  // early training stable at the learning rates we use.
  const double residual = 1.0 / std::sqrt(2.0 * c.num_hidden_layers);
  for_each_weight(c, weights_, [&](const std::string& name, const std::vector<int64_t>& shape, at::Tensor& t) {
    if (shape.size() == 1)
      t = at::ones(shape);
    else if (name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos)
      t = normal(shape) * residual;
    else
      t = normal(shape);
  });
  rope_tensors(c, rope_cos_, rope_sin_);
  set_trainable(true);
}

TrainableLlama::TrainableLlama(const Model& m) : config_(m.config()) {
  check_trainable(config_);
  // Outside inference mode a clone of an inference tensor is an ordinary,
  // differentiable tensor.
  weights_ = copy_weights(config_, float_weights(m), [](const at::Tensor& t) { return t.clone(); });
  rope_tensors(config_, rope_cos_, rope_sin_);
  set_trainable(true);
}

std::vector<at::Tensor> TrainableLlama::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& [name, t] : named_weights(config_, weights_)) out.push_back(t);
  return out;
}

void TrainableLlama::set_trainable(bool on) {
  for (auto& t : parameters()) t.set_requires_grad(on);
}

at::Tensor TrainableLlama::forward(const at::Tensor& tokens) const {
  const ModelConfig& c = config_;
  if (tokens.dim() != 2) throw Error("training forward: tokens must be [batch, time]");
  const int64_t B = tokens.size(0), T = tokens.size(1);
  if (T > c.max_position_embeddings)
    throw Error("training forward: sequence of " + std::to_string(T) + " exceeds max_position_embeddings " +
                std::to_string(c.max_position_embeddings));
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, D = c.head_dim, G = Hq / Hkv;
  const at::Tensor cos = rope_cos_.narrow(0, 0, T), sin = rope_sin_.narrow(0, 0, T);
  const at::Tensor causal =
      at::full({T, T}, -std::numeric_limits<float>::infinity(), at::TensorOptions().dtype(at::kFloat)).triu(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));

  at::Tensor x = at::embedding(weights_.embed, tokens);  // [B, T, H]
  for (const LayerWeights& w : weights_.layers) {
    at::Tensor h = rms_norm(x, w.input_norm, c.rms_norm_eps);
    at::Tensor q = rope(at::linear(h, w.q_proj).view({B, T, Hq, D}).transpose(1, 2), cos, sin);
    at::Tensor k = rope(at::linear(h, w.k_proj).view({B, T, Hkv, D}).transpose(1, 2), cos, sin);
    at::Tensor v = at::linear(h, w.v_proj).view({B, T, Hkv, D}).transpose(1, 2);
    if (G > 1) {  // query head j reads KV head j / G, as Hugging Face's repeat_kv
      k = k.repeat_interleave(G, 1);
      v = v.repeat_interleave(G, 1);
    }
    at::Tensor probs = at::softmax(at::matmul(q, k.transpose(-1, -2)) * scale + causal, -1);
    at::Tensor attn = at::matmul(probs, v).transpose(1, 2).reshape({B, T, Hq * D});
    x = x + at::linear(attn, w.o_proj);
    h = rms_norm(x, w.post_norm, c.rms_norm_eps);
    x = x + at::linear(at::silu(at::linear(h, w.gate_proj)) * at::linear(h, w.up_proj), w.down_proj);
  }
  return at::linear(rms_norm(x, weights_.final_norm, c.rms_norm_eps), weights_.lm_head);
}

}  // namespace splitspec

#include "common/train/model_weights.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <map>

#include "common/kernels/quant.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

// Float tensors as the weight set's sources: rows x cols fp32 (contiguous
// copies kept alive in `keep` until the set has copied them).
WeightSource tensor_source(const ModelConfig& config, const ModelWeights& weights, std::vector<at::Tensor>& keep) {
  std::map<std::string, at::Tensor> by_name;
  for (auto& [name, t] : named_weights(config, weights)) by_name[name] = t;
  return [by_name = std::move(by_name), &keep](const std::string& name, const std::vector<int64_t>& shape) {
    auto it = by_name.find(name);
    if (it == by_name.end() || !it->second.defined()) throw Error("weights: missing tensor '" + name + "'");
    if (it->second.sizes().vec() != shape)
      throw Error("weights: tensor '" + name + "' has shape " + shape_str(it->second.sizes().vec()) + ", expected " +
                  shape_str(shape));
    keep.push_back(it->second.detach().to(at::kFloat).contiguous());
    return MatrixRef{WType::F32, keep.back().data_ptr<float>(), shape.size() == 2 ? shape[0] : 1, shape.back()};
  };
}

}  // namespace

void for_each_weight(const ModelConfig& c, ModelWeights& w, const WeightVisitor& f) {
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t q = c.num_attention_heads * D, kv = c.num_key_value_heads * D;
  f("model.embed_tokens.weight", {c.vocab_size, H}, w.embed);
  w.layers.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    f(p + "input_layernorm.weight", {H}, lw.input_norm);
    f(p + "self_attn.q_proj.weight", {q, H}, lw.q_proj);
    f(p + "self_attn.k_proj.weight", {kv, H}, lw.k_proj);
    f(p + "self_attn.v_proj.weight", {kv, H}, lw.v_proj);
    f(p + "self_attn.o_proj.weight", {H, q}, lw.o_proj);
    f(p + "post_attention_layernorm.weight", {H}, lw.post_norm);
    f(p + "mlp.gate_proj.weight", {I, H}, lw.gate_proj);
    f(p + "mlp.up_proj.weight", {I, H}, lw.up_proj);
    f(p + "mlp.down_proj.weight", {H, I}, lw.down_proj);
  }
  f("model.norm.weight", {H}, w.final_norm);
  if (c.tie_word_embeddings)
    w.lm_head = w.embed;
  else
    f("lm_head.weight", {c.vocab_size, H}, w.lm_head);
}

std::vector<std::pair<std::string, at::Tensor>> named_weights(const ModelConfig& config, const ModelWeights& w) {
  ModelWeights handles = w;  // tensors are shared handles: nothing is copied
  std::vector<std::pair<std::string, at::Tensor>> named;
  for_each_weight(config, handles, [&](const std::string& name, const std::vector<int64_t>&, at::Tensor& t) {
    named.emplace_back(name, t);
  });
  return named;
}

ModelWeights copy_weights(const ModelConfig& config, const ModelWeights& src,
                          const std::function<at::Tensor(const at::Tensor&)>& copy) {
  ModelWeights out = src;
  for_each_weight(config, out, [&](const std::string&, const std::vector<int64_t>&, at::Tensor& t) { t = copy(t); });
  return out;
}

void save_model(const ModelConfig& config, const ModelWeights& weights, const std::string& dir, WType type) {
  c10::InferenceMode guard;
  std::vector<at::Tensor> keep;
  save_weight_set(build_weight_set(config, tensor_source(config, weights, keep), std::nullopt, true, dir), config, dir,
                  type);
}

std::shared_ptr<Model> model_from_weights(const ModelConfig& c, const ModelWeights& src, std::string name, WType type) {
  c.validate(name);
  c10::InferenceMode guard;
  std::vector<at::Tensor> keep;
  WeightSet w = build_weight_set(c, tensor_source(c, src, keep), type, false, name);
  return Model::from_weight_set(c, std::move(w), std::move(name));
}

ModelWeights float_weights(const Model& model) {
  if (model.stream()) throw Error("float_weights: " + model.name() + " is streamed from disk");
  const ModelConfig& c = model.config();
  const WeightSet& ws = model.weight_set();
  c10::InferenceMode guard;
  auto matrix = [](const MatrixRef& m) {
    at::Tensor t = at::empty({m.rows, m.cols}, at::TensorOptions().dtype(at::kFloat));
    dequantize_rows(m, 0, m.rows, t.data_ptr<float>());
    return t;
  };
  auto norm = [&](const float* v) {
    return at::from_blob(const_cast<float*>(v), {c.hidden_size}, at::TensorOptions().dtype(at::kFloat)).clone();
  };
  ModelWeights w;
  w.embed = matrix(ws.embed);
  w.layers.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    auto m = [&](LayerMatrix which) { return matrix(ws.layers[l][static_cast<int>(which)]); };
    lw.input_norm = norm(ws.input_norm(l));
    lw.q_proj = m(LayerMatrix::kQ);
    lw.k_proj = m(LayerMatrix::kK);
    lw.v_proj = m(LayerMatrix::kV);
    lw.o_proj = m(LayerMatrix::kO);
    lw.post_norm = norm(ws.post_norm(l));
    lw.gate_proj = m(LayerMatrix::kGate);
    lw.up_proj = m(LayerMatrix::kUp);
    lw.down_proj = m(LayerMatrix::kDown);
  }
  w.final_norm = norm(ws.final_norm());
  w.lm_head = c.tie_word_embeddings ? w.embed : matrix(ws.lm_head);
  return w;
}

at::Tensor to_tensor(RowsView rows) {
  return at::from_blob(const_cast<float*>(rows.data), {rows.rows, rows.cols}, at::TensorOptions().dtype(at::kFloat))
      .clone();
}

}  // namespace splitspec

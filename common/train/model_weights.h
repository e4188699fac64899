#pragma once
// A model's weights as LibTorch float tensors, the form the trainer
// optimises, and the bridges between it and the engine's Model.
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/model/model.h"

namespace splitspec {

struct LayerWeights {
  at::Tensor input_norm;  // [hidden]
  at::Tensor q_proj;      // [heads*head_dim, hidden]
  at::Tensor k_proj;      // [kv_heads*head_dim, hidden]
  at::Tensor v_proj;      // [kv_heads*head_dim, hidden]
  at::Tensor o_proj;      // [hidden, heads*head_dim]
  at::Tensor post_norm;   // [hidden]
  at::Tensor gate_proj;   // [intermediate, hidden]
  at::Tensor up_proj;     // [intermediate, hidden]
  at::Tensor down_proj;   // [hidden, intermediate]
};

struct ModelWeights {
  at::Tensor embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  at::Tensor final_norm;  // [hidden]
  at::Tensor lm_head;     // [vocab, hidden]; the same tensor as embed when tied
};

// The one list of a model's weights: calls f(name, shape, tensor) for each,
// with its Hugging Face name, in file order; the lm_head only when untied
// (after the walk, a tied lm_head is set to the embedding). Sizes w.layers.
using WeightVisitor = std::function<void(const std::string& name, const std::vector<int64_t>& shape, at::Tensor& t)>;
void for_each_weight(const ModelConfig& config, ModelWeights& w, const WeightVisitor& f);
// (name, tensor) of every weight of `w`, in file order.
std::vector<std::pair<std::string, at::Tensor>> named_weights(const ModelConfig& config, const ModelWeights& w);
// A copy of `src` made by `copy` tensor by tensor, ties preserved.
ModelWeights copy_weights(const ModelConfig& config, const ModelWeights& src,
                          const std::function<at::Tensor(const at::Tensor&)>& copy);
// Writes config.json and model.safetensors into `dir` (created if needed),
// the matrices stored as `type` (weight_set.h says which tensors differ).
void save_model(const ModelConfig& config, const ModelWeights& weights, const std::string& dir,
                WType type = WType::F32);
// An inference copy of float weights, its matrices stored as `type`.
std::shared_ptr<Model> model_from_weights(const ModelConfig& config, const ModelWeights& weights, std::string name,
                                          WType type = WType::F32);
// Float copies of every weight of an in-memory model (dequantized).
ModelWeights float_weights(const Model& model);

// Forward results as tensors (copies).
at::Tensor to_tensor(RowsView rows);

}  // namespace splitspec

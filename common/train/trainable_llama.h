#pragma once
// The LLaMA module in training form: the same ModelWeights and the same math
// as Model::forward, written with differentiable ATen ops over whole
// [batch, time] blocks so autograd can train it. What it saves, Model loads.
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "common/model/model.h"
#include "common/train/model_weights.h"

namespace splitspec {

// Throws splitspec::Error unless `c` is a model this module trains: the
// LLaMA forward only, since a config of another family would be trained as
// LLaMA and saved as that family, a model that computes otherwise than it
// was trained.
void check_trainable(const ModelConfig& c);

class TrainableLlama {
 public:
  // Random initialisation (normal, std 0.02; norms at 1), seeded.
  TrainableLlama(const ModelConfig& config, uint64_t seed);
  // Trainable copies of a loaded model's weights.
  explicit TrainableLlama(const Model& model);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // Every distinct parameter tensor (a tied head appears once).
  std::vector<at::Tensor> parameters() const;
  void set_trainable(bool on);

  // tokens: int64 [batch, time], positions 0..time-1, causal. Returns logits
  // [batch, time, vocab].
  at::Tensor forward(const at::Tensor& tokens) const;

 private:
  ModelConfig config_;
  ModelWeights weights_;
  at::Tensor rope_cos_, rope_sin_;  // [max_positions, head_dim/2]
};

}  // namespace splitspec

#include "tests/torch_test_util.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

namespace splitspec::test {

std::shared_ptr<Model> noisy_copy(const Model& target, double noise, uint64_t seed) {
  c10::InferenceMode guard;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  ModelWeights w = float_weights(target);
  auto jitter = [&](at::Tensor& t) { t = t + at::randn(t.sizes(), gen) * noise; };
  jitter(w.embed);
  for (auto& l : w.layers) {
    jitter(l.q_proj);
    jitter(l.gate_proj);
    jitter(l.down_proj);
  }
  w.lm_head = target.config().tie_word_embeddings ? w.embed : w.lm_head + at::randn(w.lm_head.sizes(), gen) * noise;
  return model_from_weights(target.config(), w, "noisy-draft");
}

}  // namespace splitspec::test

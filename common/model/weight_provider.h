#pragma once
// Where the CPU forward takes its weights from: held in memory (a WeightSet)
// or streamed from disk under a budget (StreamedWeights). The forward is one
// piece of code over this interface; a provider decides when bytes arrive.
// Free of LibTorch.
#include <cstdint>

#include "common/kernels/weight_type.h"
#include "common/model/weight_names.h"
#include "common/model/weight_set.h"

namespace splitspec {

class WeightProvider {
 public:
  virtual ~WeightProvider() = default;

  // A forward calls begin_forward(), then acquire()/release() for every layer
  // matrix in the forward's order (layer by layer, LayerMatrix order), then
  // head(), then end_forward(), which also runs when the forward throws.
  virtual void begin_forward() {}
  virtual void end_forward() noexcept {}
  // A matrix, valid until release().
  virtual MatrixRef acquire(int64_t layer, LayerMatrix m) = 0;
  virtual void release() {}
  // Whether several matrices may be acquired before their releases, which
  // then come in the same order (weights in memory); a streamed provider
  // reuses its read buffer and holds one at a time.
  virtual bool holds_several() const { return false; }
  // The LM head on m rows already through the final norm: logits [m, vocab]
  // (m may be 0: a streamed head still passes over its units).
  virtual void head(const float* normed, int64_t m, float* logits) = 0;

  // Embedding rows of `ids` into out[n, hidden].
  virtual void embed(const int64_t* ids, int64_t n, float* out) = 0;
  virtual const float* input_norm(int64_t layer) const = 0;
  virtual const float* post_norm(int64_t layer) const = 0;
  virtual const float* final_norm() const = 0;
  // Layer l's family vector (weight_names.h), or null when it has none.
  virtual const float* vector(int64_t layer, LayerVector v) const = 0;
  // The per-layer inputs' weights, or null where the provider has none
  // (their embedding's data may be null where its rows are read by id).
  virtual const PerLayerInputs* per_layer_inputs() const { return nullptr; }
  // The per-layer embedding's rows of `ids` into out[n, layers x size].
  virtual void per_layer_embed(const int64_t* ids, int64_t n, float* out);
};

// The weights of a WeightSet in memory, which must outlive it.
class ResidentWeights final : public WeightProvider {
 public:
  explicit ResidentWeights(const WeightSet& weights) : w_(weights) {}
  MatrixRef acquire(int64_t layer, LayerMatrix m) override { return w_.layers[layer][static_cast<int>(m)]; }
  bool holds_several() const override { return true; }
  void head(const float* normed, int64_t m, float* logits) override;
  void embed(const int64_t* ids, int64_t n, float* out) override;
  const float* input_norm(int64_t layer) const override { return w_.input_norm(layer); }
  const float* post_norm(int64_t layer) const override { return w_.post_norm(layer); }
  const float* final_norm() const override { return w_.final_norm(); }
  const float* vector(int64_t layer, LayerVector v) const override { return w_.vector(layer, v); }
  const PerLayerInputs* per_layer_inputs() const override { return w_.per_layer.embed.data ? &w_.per_layer : nullptr; }

 private:
  const WeightSet& w_;
};

}  // namespace splitspec

#include "common/model/weight_provider.h"

#include "common/kernels/linear.h"
#include "common/kernels/quant.h"

#include "common/util/error.h"

namespace splitspec {

void WeightProvider::per_layer_embed(const int64_t* ids, int64_t n, float* out) {
  const PerLayerInputs* pl = per_layer_inputs();
  if (!pl || !pl->embed.data) throw Error("per-layer embedding: the provider holds none");
  for (int64_t i = 0; i < n; ++i) dequantize_rows(pl->embed, ids[i], ids[i] + 1, out + i * pl->embed.cols);
}

void ResidentWeights::head(const float* normed, int64_t m, float* logits) {
  kernels::linear(normed, m, w_.lm_head, logits);
}

void ResidentWeights::embed(const int64_t* ids, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) dequantize_rows(w_.embed, ids[i], ids[i] + 1, out + i * w_.embed.cols);
}

}  // namespace splitspec

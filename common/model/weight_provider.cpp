#include "common/model/weight_provider.h"

#include "common/kernels/linear.h"
#include "common/kernels/quant.h"

namespace splitspec {

void ResidentWeights::head(const float* normed, int64_t m, float* logits) {
  kernels::linear(normed, m, w_.lm_head, logits);
}

void ResidentWeights::embed(const int64_t* ids, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) dequantize_rows(w_.embed, ids[i], ids[i] + 1, out + i * w_.embed.cols);
}

}  // namespace splitspec

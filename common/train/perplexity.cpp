#include "common/train/perplexity.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>

#include "common/util/error.h"
#include "common/train/corpus.h"
#include "common/train/model_weights.h"

namespace splitspec {

double perplexity(const Model& model, const std::vector<int32_t>& tokens, int64_t seq_len, int64_t max_windows) {
  seq_len = std::min<int64_t>(seq_len, model.config().max_position_embeddings - 1);
  WindowSampler windows(tokens, seq_len);
  int64_t count = windows.num_windows();
  if (max_windows > 0) count = std::min(count, max_windows);
  c10::InferenceMode guard;
  KVCache cache = model.new_cache(seq_len);
  double nll = 0.0;
  int64_t n = 0;
  for (int64_t w = 0; w < count; ++w) {
    const std::vector<int64_t> win = windows.window(w);
    ForwardRequest req;
    req.tokens.assign(win.begin(), win.end() - 1);
    cache.truncate(0);
    const at::Tensor logp = at::log_softmax(to_tensor(model.forward(req, cache).logits), -1);
    const at::Tensor targets = at::tensor(std::vector<int64_t>(win.begin() + 1, win.end()));
    nll -= logp.gather(1, targets.unsqueeze(1)).sum().item<double>();
    n += seq_len;
  }
  return std::exp(nll / static_cast<double>(n));
}

}  // namespace splitspec

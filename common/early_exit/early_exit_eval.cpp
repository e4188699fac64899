#include "common/early_exit/early_exit_eval.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "common/util/error.h"

namespace splitspec {

std::vector<ExitQuality> evaluate_exits(const Model& model, const EarlyExits& exits, const std::vector<int32_t>& tokens,
                                        int64_t seq_len, int64_t max_windows) {
  c10::InferenceMode guard;
  if (seq_len < 1 || static_cast<int64_t>(tokens.size()) < seq_len)
    throw Error("evaluate exits: the text has fewer than " + std::to_string(seq_len) + " tokens");
  const size_t n_exits = exits.adapters().size();
  std::vector<double> matches(n_exits, 0.0), confidence(n_exits, 0.0);
  int64_t positions = 0;
  const int64_t windows = std::min<int64_t>(max_windows, static_cast<int64_t>(tokens.size()) / seq_len);
  ForwardRequest r;
  for (const ExitAdapter& a : exits.adapters()) r.hidden_layers.push_back(a.after_layer - 1);
  for (int64_t w = 0; w < windows; ++w) {
    r.tokens.assign(tokens.begin() + w * seq_len, tokens.begin() + (w + 1) * seq_len);
    KVCache cache = model.new_cache(seq_len);
    const ForwardResult out = model.forward(r, cache);
    const at::Tensor final_top = out.logits.argmax(-1);
    for (size_t i = 0; i < n_exits; ++i) {
      const at::Tensor logits = exits.logits(model, i, out.hidden.at(exits.adapters()[i].after_layer - 1));
      matches[i] += logits.argmax(-1).eq(final_top).sum().item<double>();
      confidence[i] += std::get<0>(at::softmax(logits, -1).max(-1)).sum().item<double>();
    }
    positions += seq_len;
  }
  std::vector<ExitQuality> q;
  for (size_t i = 0; i < n_exits; ++i)
    q.push_back({exits.adapters()[i].after_layer, positions ? matches[i] / positions : 0.0,
                 positions ? confidence[i] / positions : 0.0});
  return q;
}

}  // namespace splitspec

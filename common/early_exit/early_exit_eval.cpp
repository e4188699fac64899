#include "common/early_exit/early_exit_eval.h"

#include "common/decoding/sampling.h"
#include "common/kernels/kernels.h"
#include "common/util/error.h"

namespace splitspec {

std::vector<ExitQuality> evaluate_exits(const Backend& model, const EarlyExits& exits, const std::vector<int32_t>& tokens,
                                        int64_t seq_len, int64_t max_windows) {
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
    const std::unique_ptr<KVStore> kv = model.new_kv(seq_len);
    const ForwardResult out = std::move(model.forward_batch({{&r, kv.get()}})[0]);
    const int64_t V = out.logits.cols();
    for (size_t i = 0; i < n_exits; ++i) {
      const Rows logits = exits.logits(model, i, out.hidden.at(exits.adapters()[i].after_layer - 1));
      for (int64_t row = 0; row < logits.rows(); ++row) {
        const float* p = logits.row(row);
        const int32_t top = greedy_token(p, V);
        matches[i] += top == greedy_token(out.logits.row(row), V) ? 1.0 : 0.0;
        confidence[i] += 1.0 / kernels::sum_exp(p, V, p[top]);
      }
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

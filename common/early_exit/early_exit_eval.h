#pragma once
// How well each early exit predicts the final layer (the paper's Fig. 7):
// over held-out text, the share of positions where the exit's top token is
// the final layer's, and the exit's mean top softmax probability.
#include <cstdint>
#include <vector>

#include "common/early_exit/early_exit.h"

namespace splitspec {

struct ExitQuality {
  int64_t after_layer = 0;
  double match_rate = 0;       // argmax(exit) == argmax(final)
  double mean_confidence = 0;  // mean of max softmax(exit)
};

// Consecutive windows of `seq_len` tokens of `tokens`, at most `max_windows`.
std::vector<ExitQuality> evaluate_exits(const Backend& model, const EarlyExits& exits, const std::vector<int32_t>& tokens,
                                        int64_t seq_len, int64_t max_windows);

}  // namespace splitspec

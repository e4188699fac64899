#pragma once
#include <cstdint>
#include <vector>

#include "common/model/model.h"

namespace splitspec {

// exp(mean next-token negative log-likelihood) over consecutive windows of
// seq_len tokens (each scored from a fresh context), at most max_windows of
// them (0: all). Uses the inference forward pass, i.e. what is shipped.
double perplexity(const Model& model, const std::vector<int32_t>& tokens, int64_t seq_len, int64_t max_windows = 0);

}  // namespace splitspec

#pragma once
// Types shared by every decoding mode: what to generate, and what came out.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/decoding/generate_options.h"

namespace splitspec {

struct GenerationStats {
  int64_t new_tokens = 0;
  double prefill_ms = 0;  // prompt forward
  double wall_ms = 0;     // everything, prefill included
  double ms_per_token = 0;
  int64_t target_forwards = 0;
};

struct Generation {
  std::vector<int32_t> output_ids;  // generated ids only
  std::string finish_reason;        // "length", "eos" or "context"
  GenerationStats stats;
};

// Called with each token as soon as it is final.
using TokenCallback = std::function<void(int32_t)>;

}  // namespace splitspec

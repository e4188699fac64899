#pragma once
// Plain autoregressive decoding with the target on this machine: the
// reference every speculative mode must reproduce.
#include <vector>

#include "client/generation.h"
#include "common/engine/model.h"

namespace splitspec {

// Throws splitspec::Error for an empty prompt, out-of-vocabulary ids, a prompt
// that leaves no room in the context, or invalid sampling parameters.
Generation generate_local_ar(const Model& model, const std::vector<int32_t>& prompt_ids,
                             const GenerateOptions& options, const TokenCallback& on_token = {});

}  // namespace splitspec

#pragma once
// Speculative decoding's own parameters for one generation, apart from
// sampling's (as llama.cpp's common_params_speculative and vLLM's
// SpeculativeConfig are): the public Request is one (client_options.h), the
// CLI's and the benchmarks' --gamma fill one (client/cli/speculative_flags.h),
// and the round loop hands it to the drafter unchanged (DraftParams). Part
// of the public API: the installed <splitspec/client.h> holds this file's
// text (client/package/CMakeLists.txt), so it includes standard headers only.
#include <cstdint>

namespace splitspec {

struct SpeculativeParams {
  // Chain drafters (model, pld): draft tokens per round, from 1 to the
  // server's max_draft_tokens.
  int32_t gamma = 4;
};

}  // namespace splitspec

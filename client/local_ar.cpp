#include "client/local_ar.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <chrono>

#include "common/util/stopwatch.h"
#include "common/decoding/target_decoder.h"

namespace splitspec {

Generation generate_local_ar(const Model& model, const std::vector<int32_t>& prompt_ids,
                             const GenerateOptions& options, const TokenCallback& on_token) {
  const auto t0 = SteadyClock::now();
  c10::InferenceMode guard;
  TargetDecoder dec(model, prompt_ids, options);
  Generation g;
  while (!dec.finished()) {
    const RoundResult r = dec.step();
    if (g.stats.target_forwards == 0) g.stats.prefill_ms = ms_since(t0);
    g.stats.target_forwards += 1;
    for (int32_t tok : r.verdict.tokens) {
      g.output_ids.push_back(tok);
      if (on_token) on_token(tok);
    }
  }
  g.finish_reason = finish_reason_name(dec.finish());
  g.stats.new_tokens = static_cast<int64_t>(g.output_ids.size());
  g.stats.wall_ms = ms_since(t0);
  g.stats.ms_per_token = g.stats.new_tokens ? g.stats.wall_ms / g.stats.new_tokens : 0.0;
  return g;
}

}  // namespace splitspec

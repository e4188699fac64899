#include "client/speculative_chain.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <chrono>

#include "common/util/error.h"
#include "common/util/stopwatch.h"
#include "common/decoding/target_decoder.h"

namespace splitspec {

SpeculativeGeneration generate_speculative_chain(const Model& target, const Model& draft,
                                                 const std::vector<int32_t>& prompt_ids, const GenerateOptions& options,
                                                 int32_t gamma, const TokenCallback& on_token) {
  if (draft.config().vocab_size != target.config().vocab_size)
    throw Error("draft vocab_size " + std::to_string(draft.config().vocab_size) + " differs from the target's " +
                std::to_string(target.config().vocab_size));
  if (gamma < 1) throw Error("gamma must be at least 1");
  const auto t0 = SteadyClock::now();
  c10::InferenceMode guard;
  TargetDecoder dec(target, prompt_ids, options);
  ModelDrafter drafter(draft);
  drafter.begin(prompt_ids);
  Rng draft_rng(draft_seed(options.sampling.seed));
  SpeculativeGeneration out;
  Generation& g = out.generation;
  SpeculationStats& s = out.spec;
  g.stats.prefill_ms = ms_since(t0);

  while (!dec.finished()) {
    const DraftTree tree = drafter.draft(std::min(gamma, dec.room()), options.sampling, draft_rng);
    const RoundResult r = dec.verify(tree);
    drafter.accept(r.verdict.tokens, r.verdict.accepted);
    s.rounds += 1;
    s.target_ms += r.forward_ms;
    for (int32_t tok : r.verdict.tokens) {
      g.output_ids.push_back(tok);
      if (on_token) on_token(tok);
    }
  }
  s.draft = drafter.stats();
  s.target_forwards = dec.forwards();
  g.finish_reason = finish_reason_name(dec.finish());
  g.stats.target_forwards = dec.forwards();
  g.stats.new_tokens = static_cast<int64_t>(g.output_ids.size());
  g.stats.wall_ms = ms_since(t0);
  g.stats.ms_per_token = g.stats.new_tokens ? g.stats.wall_ms / g.stats.new_tokens : 0.0;
  s.tau = s.rounds ? static_cast<double>(g.stats.new_tokens) / static_cast<double>(s.rounds) : 0.0;
  return out;
}

}  // namespace splitspec

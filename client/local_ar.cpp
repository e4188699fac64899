#include "client/local_ar.h"

#include <ATen/ATen.h>

#include <chrono>

#include "common/error.h"

namespace splitspec {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Generation generate_local_ar(const Model& model, const std::vector<int32_t>& prompt_ids,
                             const GenerateOptions& options, const TokenCallback& on_token) {
  const ModelConfig& c = model.config();
  options.sampling.validate();
  if (prompt_ids.empty()) throw Error("prompt is empty: give at least one token (e.g. BOS)");
  if (options.max_new_tokens < 0) throw Error("max-new-tokens must be >= 0");
  const int64_t prompt_len = static_cast<int64_t>(prompt_ids.size());
  if (prompt_len >= c.max_position_embeddings)
    throw Error("prompt of " + std::to_string(prompt_len) + " tokens does not fit the model's context of " +
                std::to_string(c.max_position_embeddings) + " with room to generate");
  for (int32_t t : prompt_ids)
    if (t < 0 || t >= c.vocab_size)
      throw Error("prompt token id " + std::to_string(t) + " outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");

  const auto t0 = std::chrono::steady_clock::now();
  // Generation stops at the context's end; the cache never needs more.
  const int64_t budget = std::min<int64_t>(options.max_new_tokens, c.max_position_embeddings - prompt_len);
  KVCache cache = model.new_cache(prompt_len + std::max<int64_t>(budget, 1));
  Rng rng(options.sampling.seed);
  Generation g;
  g.finish_reason = "length";

  ForwardRequest req;
  req.tokens = prompt_ids;
  req.logits_rows = std::vector<int64_t>{prompt_len - 1};
  at::Tensor logits = model.forward(req, cache).logits;
  g.stats.target_forwards = 1;
  g.stats.prefill_ms = ms_since(t0);

  req.logits_rows = std::vector<int64_t>{0};
  for (int64_t i = 0; i < budget; ++i) {
    const int32_t tok = next_token(logits[0], options.sampling, rng);
    g.output_ids.push_back(tok);
    if (on_token) on_token(tok);
    if (tok == c.eos_token_id && !options.ignore_eos) {
      g.finish_reason = "eos";
      break;
    }
    if (i + 1 == budget) break;
    req.tokens = {tok};
    logits = model.forward(req, cache).logits;
    g.stats.target_forwards += 1;
  }
  g.stats.new_tokens = static_cast<int64_t>(g.output_ids.size());
  g.stats.wall_ms = ms_since(t0);
  g.stats.ms_per_token = g.stats.new_tokens ? g.stats.wall_ms / g.stats.new_tokens : 0.0;
  return g;
}

}  // namespace splitspec

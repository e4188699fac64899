#include "client/speculative_chain.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <chrono>

#include "common/error.h"
#include "common/verify.h"

namespace splitspec {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
}  // namespace

std::vector<double> SpeculationStats::acceptance_per_position() const {
  std::vector<double> out;
  for (size_t i = 0; i < proposed.size(); ++i)
    out.push_back(proposed[i] ? static_cast<double>(accepted[i]) / static_cast<double>(proposed[i]) : 0.0);
  return out;
}

SpeculativeGeneration generate_speculative_chain(const Model& target, const Model& draft,
                                                 const std::vector<int32_t>& prompt_ids, const GenerateOptions& options,
                                                 int32_t gamma, const TokenCallback& on_token) {
  const ModelConfig& tc = target.config();
  if (draft.config().vocab_size != tc.vocab_size)
    throw Error("draft vocab_size " + std::to_string(draft.config().vocab_size) + " differs from the target's " +
                std::to_string(tc.vocab_size));
  if (gamma < 1) throw Error("gamma must be at least 1");
  options.sampling.validate();
  if (prompt_ids.empty()) throw Error("prompt is empty: give at least one token (e.g. BOS)");
  const int64_t prompt_len = static_cast<int64_t>(prompt_ids.size());
  const int64_t context = std::min(tc.max_position_embeddings, draft.config().max_position_embeddings);
  if (prompt_len >= context)
    throw Error("prompt of " + std::to_string(prompt_len) + " tokens does not fit the context of " + std::to_string(context));
  for (int32_t t : prompt_ids)
    if (t < 0 || t >= tc.vocab_size)
      throw Error("prompt token id " + std::to_string(t) + " outside the vocabulary [0, " + std::to_string(tc.vocab_size) + ")");

  const auto t0 = Clock::now();
  c10::InferenceMode guard;
  const int64_t budget = std::min<int64_t>(options.max_new_tokens, context - prompt_len);
  KVCache tcache = target.new_cache(context), dcache = draft.new_cache(context);
  Rng rng(options.sampling.seed);
  SpeculativeGeneration out;
  Generation& g = out.generation;
  SpeculationStats& s = out.spec;
  s.proposed.assign(gamma, 0);
  s.accepted.assign(gamma, 0);
  g.finish_reason = "length";

  // Both caches hold every committed token but the last; `seq` is all of them.
  std::vector<int32_t> seq = prompt_ids;
  ForwardRequest pre;
  pre.tokens = std::vector<int32_t>(prompt_ids.begin(), prompt_ids.end() - 1);
  pre.logits_rows = std::vector<int64_t>{};
  if (!pre.tokens.empty()) {
    target.forward(pre, tcache);
    draft.forward(pre, dcache);
  }
  g.stats.target_forwards = pre.tokens.empty() ? 0 : 1;
  g.stats.prefill_ms = ms_since(t0);

  while (static_cast<int64_t>(g.output_ids.size()) < budget) {
    const int64_t committed = static_cast<int64_t>(seq.size());
    // Room for the verification forward: last token + gamma drafts.
    const int32_t k = static_cast<int32_t>(std::min<int64_t>(gamma, context - committed));
    std::vector<int32_t> drafts;
    std::vector<Distribution> qs;
    auto td = Clock::now();
    for (int32_t i = 0; i < k; ++i) {
      ForwardRequest r;
      // Tokens the draft cache lacks: the last committed one (plus, after a
      // fully accepted round, the final draft token it never consumed).
      if (i == 0)
        r.tokens = std::vector<int32_t>(seq.begin() + dcache.size(), seq.end());
      else
        r.tokens.assign(1, drafts.back());
      r.logits_rows = std::vector<int64_t>{static_cast<int64_t>(r.tokens.size()) - 1};
      const at::Tensor row = draft.forward(r, dcache).logits[0];
      if (options.sampling.greedy()) {
        drafts.push_back(greedy_token(row));  // greedy verification needs no q
      } else {
        Sample smp = sample(row, options.sampling, rng);
        drafts.push_back(smp.token);
        qs.push_back(std::move(smp.q));
      }
      s.draft_forwards += 1;
    }
    s.draft_ms += ms_since(td);

    auto tv = Clock::now();
    ForwardRequest vr;
    vr.tokens.assign(1, seq.back());
    vr.tokens.insert(vr.tokens.end(), drafts.begin(), drafts.end());
    const at::Tensor logits = target.forward(vr, tcache).logits;
    s.target_ms += ms_since(tv);
    s.target_forwards += 1;
    g.stats.target_forwards += 1;

    const Verdict v = verify_chain(drafts, std::move(qs), logits, options.sampling, rng);
    s.rounds += 1;
    for (int32_t i = 0; i < k; ++i) {
      s.proposed[i] += 1;
      if (i < v.accepted) s.accepted[i] += 1;
    }
    // Keep the last committed token and the accepted drafts in both caches.
    tcache.truncate(committed + v.accepted);
    dcache.truncate(std::min<int64_t>(dcache.size(), committed + v.accepted));
    bool stop = false;
    for (int32_t tok : v.tokens) {
      seq.push_back(tok);
      g.output_ids.push_back(tok);
      if (on_token) on_token(tok);
      if (tok == tc.eos_token_id && !options.ignore_eos) {
        g.finish_reason = "eos";
        stop = true;
        break;
      }
      if (static_cast<int64_t>(g.output_ids.size()) >= budget) {
        stop = true;
        break;
      }
    }
    if (stop) break;
  }
  g.stats.new_tokens = static_cast<int64_t>(g.output_ids.size());
  g.stats.wall_ms = ms_since(t0);
  g.stats.ms_per_token = g.stats.new_tokens ? g.stats.wall_ms / g.stats.new_tokens : 0.0;
  s.tau = s.rounds ? static_cast<double>(g.stats.new_tokens) / static_cast<double>(s.rounds) : 0.0;
  return out;
}

}  // namespace splitspec

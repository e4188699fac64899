#include "common/drafting/model_drafter.h"

#include <ATen/ATen.h>

#include <chrono>

#include "common/util/error.h"
#include "common/util/stopwatch.h"

namespace splitspec {

std::vector<double> acceptance_rates(const std::vector<int64_t>& proposed, const std::vector<int64_t>& accepted) {
  std::vector<double> out;
  for (size_t i = 0; i < proposed.size(); ++i)
    out.push_back(proposed[i] ? static_cast<double>(accepted[i]) / static_cast<double>(proposed[i]) : 0.0);
  return out;
}

std::vector<double> DrafterStats::acceptance_per_position() const { return acceptance_rates(proposed, accepted); }

ModelDrafter::ModelDrafter(const Model& draft) : draft_(draft), cache_(draft.new_cache()) {}

void prefill_draft(const Model& draft, KVCache& cache, const std::vector<int32_t>& prompt) {
  if (prompt.empty()) throw Error("prompt is empty: give at least one token (e.g. BOS)");
  if (static_cast<int64_t>(prompt.size()) >= cache.capacity())
    throw Error("prompt of " + std::to_string(prompt.size()) + " tokens does not fit the draft's context of " +
                std::to_string(cache.capacity()));
  cache.truncate(0);
  ForwardRequest pre;
  pre.tokens.assign(prompt.begin(), prompt.end() - 1);
  pre.logits_rows = std::vector<int64_t>{};
  if (!pre.tokens.empty()) draft.forward(pre, cache);
}

void ModelDrafter::begin(const std::vector<int32_t>& prompt) {
  const auto t0 = SteadyClock::now();
  prefill_draft(draft_, cache_, prompt);
  seq_ = prompt;
  last_k_ = 0;
  stats_.prefill_ms += ms_since(t0);
}

DraftTree ModelDrafter::draft(int32_t k, const SamplingParams& params, Rng& rng, const std::function<bool()>& stop) {
  // The draft's own context bounds how far it can look ahead.
  k = static_cast<int32_t>(std::min<int64_t>(k, cache_.capacity() - static_cast<int64_t>(seq_.size())));
  const auto t0 = SteadyClock::now();
  std::vector<int32_t> tokens;
  std::vector<Distribution> qs;
  for (int32_t i = 0; i < k; ++i) {
    if (stop && stop()) break;
    ForwardRequest r;
    // Tokens the cache lacks: the last committed one (plus, after a fully
    // accepted round, the final draft token it never consumed).
    if (i == 0)
      r.tokens.assign(seq_.begin() + cache_.size(), seq_.end());
    else
      r.tokens.assign(1, tokens.back());
    r.logits_rows = std::vector<int64_t>{static_cast<int64_t>(r.tokens.size()) - 1};
    const at::Tensor row = draft_.forward(r, cache_).logits[0];
    if (params.greedy()) {
      tokens.push_back(greedy_token(row));  // greedy verification needs no q
    } else {
      Sample s = sample(row, params, rng);
      tokens.push_back(s.token);
      qs.push_back(std::move(s.q));
    }
    stats_.forwards += 1;
  }
  // Drafted entries stay cached; accept() trims them to what was accepted.
  stats_.draft_ms += ms_since(t0);
  last_k_ = static_cast<int32_t>(tokens.size());
  if (stats_.proposed.size() < tokens.size()) {
    stats_.proposed.resize(tokens.size(), 0);
    stats_.accepted.resize(tokens.size(), 0);
  }
  return DraftTree::chain(std::move(tokens), std::move(qs));
}

void ModelDrafter::record(int32_t accepted) {
  stats_.rounds += 1;
  for (int32_t i = 0; i < last_k_; ++i) {
    stats_.proposed[i] += 1;
    if (i < accepted) stats_.accepted[i] += 1;
  }
  last_k_ = 0;
}

void ModelDrafter::fork_after(const ModelDrafter& src, const std::vector<int32_t>& tokens, int32_t accepted) {
  const int64_t committed = static_cast<int64_t>(src.seq_.size());
  cache_.copy_prefix_from(src.cache_, std::min<int64_t>(src.cache_.size(), committed + accepted));
  seq_ = src.seq_;
  seq_.insert(seq_.end(), tokens.begin(), tokens.end());
  last_k_ = 0;
}

void ModelDrafter::swap_state(ModelDrafter& other) {
  std::swap(cache_, other.cache_);
  std::swap(seq_, other.seq_);
  std::swap(last_k_, other.last_k_);
}

void ModelDrafter::accept(const std::vector<int32_t>& tokens, int32_t accepted) {
  const int64_t committed = static_cast<int64_t>(seq_.size());
  record(accepted);
  // The cache keeps the last committed token and the accepted drafts.
  cache_.truncate(std::min<int64_t>(cache_.size(), committed + accepted));
  seq_.insert(seq_.end(), tokens.begin(), tokens.end());
}

}  // namespace splitspec

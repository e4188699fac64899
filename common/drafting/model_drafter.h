#pragma once
// A draft model proposing chains, in the begin / draft / accept shape of
// llama.cpp's speculative drafters. It keeps its own KV cache in step with
// the committed sequence and its own counters.
#include <cstdint>
#include <functional>
#include <vector>

#include "common/engine/model.h"
#include "common/decoding/token_tree.h"

namespace splitspec {

struct DrafterStats {
  int64_t rounds = 0;
  std::vector<int64_t> proposed;  // per draft position: rounds that drafted it
  std::vector<int64_t> accepted;  // per draft position: rounds that accepted it
  double prefill_ms = 0;
  double draft_ms = 0;  // every draft forward after the prefill
  int64_t forwards = 0;
  std::vector<double> acceptance_per_position() const;
};

// A drafter's Rng seed for a generation seeded `seed`: its sampling draws stay
// independent of the verifier's accept/reject draws.
inline uint64_t draft_seed(uint64_t seed) { return seed ^ 0x9e3779b97f4a7c15ull; }

// Accepted / proposed per draft position (0 where nothing was proposed).
std::vector<double> acceptance_rates(const std::vector<int64_t>& proposed, const std::vector<int64_t>& accepted);

// Starts a draft's cache for `prompt`: every token but the last, which the
// first draft step reads. Throws splitspec::Error for an empty prompt or one
// the draft's context cannot hold.
void prefill_draft(const Model& draft, KVCache& cache, const std::vector<int32_t>& prompt);

class ModelDrafter {
 public:
  explicit ModelDrafter(const Model& draft);

  // Starts a generation: the cache takes the prompt but its last token.
  void begin(const std::vector<int32_t>& prompt);
  // k tokens drafted greedily or sampled with `params` (then each carries the
  // post-filter q it was drawn from). Does not change the committed state.
  // `stop`, checked before each draft forward, cuts the draft short.
  DraftTree draft(int32_t k, const SamplingParams& params, Rng& rng, const std::function<bool()>& stop = {});
  // The round's outcome: `tokens` (accepted drafts, then the target's token)
  // are committed; `accepted` of the last draft's tokens were accepted.
  void accept(const std::vector<int32_t>& tokens, int32_t accepted);

  // Pre-drafting. This drafter becomes `src` as it would be after
  // src.accept(tokens, accepted), src itself untouched: the shared prefix of
  // the KV cache is copied, not recomputed.
  void fork_after(const ModelDrafter& src, const std::vector<int32_t>& tokens, int32_t accepted);
  // Counts the outcome of the last draft (as accept() does) without changing
  // the state: for a drafter about to take a pre-drafted state by swap_state.
  void record(int32_t accepted);
  // Exchanges sequence, cache and pending draft with `other` (not the stats).
  void swap_state(ModelDrafter& other);

  const DrafterStats& stats() const { return stats_; }
  const std::vector<int32_t>& sequence() const { return seq_; }
  const Model& model() const { return draft_; }

 private:
  const Model& draft_;
  KVCache cache_;  // a prefix of seq_: every committed token but the last, plus the live draft
  std::vector<int32_t> seq_;
  int32_t last_k_ = 0;
  DrafterStats stats_;
};

}  // namespace splitspec

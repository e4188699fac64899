#pragma once
// The target's side of one generation: its KV cache, the committed sequence,
// the stop rules, and the one place rounds are verified. Local decoding, the
// server's sessions and its autoregressive stream all run on it, so every
// mode commits tokens, rolls back caches and stops in exactly the same way.
#include <chrono>
#include <cstdint>
#include <algorithm>
#include <functional>
#include <vector>

#include "common/backend/backend.h"
#include "common/decoding/forward_emulation.h"
#include "common/decoding/generate_options.h"
#include "common/decoding/verify.h"

namespace splitspec {

struct RoundResult {
  // tokens: what to append, cut at the first stop (EOS or budget); accepted
  // counts the drafts verification accepted, before any cut.
  Verdict verdict;
  FinishReason finish = FinishReason::kNone;
  double forward_ms = 0;  // the target forward
  double verify_ms = 0;   // accept/reject and cache compaction
  VerdictExtras extras;   // what the round's RoundRequest asked for
};

class TargetDecoder {
 public:
  // Throws splitspec::Error for an empty prompt, out-of-vocabulary ids, a
  // prompt that leaves no room in the context, or invalid options.
  // `max_tree` bounds the draft nodes of a round (-1: only the context
  // does); the KV cache grows as the generation does, up to the prompt, the
  // budget and one largest tree, and never past that.
  // The target must outlive the decoder.
  TargetDecoder(const Backend& target, std::vector<int32_t> prompt, const GenerateOptions& options,
                int32_t max_tree = -1);

  // Calls `tap` during a round's forward after each layer count in
  // `tap_layers` with the rows verification will read ([tree.size()+1,
  // hidden]) and the verifier's Rng as it stands before this round's draws.
  // Early exits predict the verdict there; the tap cannot change the round.
  using LayerTap = std::function<void(int64_t after_layer, RowsView rows, const Rng& rng)>;
  struct RoundRequest {
    ExtrasRequest extras;
    std::vector<int64_t> tap_layers;
    LayerTap tap;
  };
  // One speculative round: the tokens not yet in the cache plus `tree`, in one
  // forward under the tree mask, verified (greedy or rejection sampling
  // against the tree's q), the accepted path compacted into the cache. The
  // tree must fit: tree.size() <= room(). An empty tree is one
  // autoregressive step, drawn exactly as plain sampling would. Throws
  // splitspec::Error on a malformed tree (out-of-vocabulary ids, q that are
  // not distributions).
  RoundResult verify(const DraftTree& tree, const RoundRequest& request = {});
  // One round of another generation, for verify_batch().
  struct BatchRound {
    TargetDecoder* decoder;
    const DraftTree* tree;
    const RoundRequest* request;
  };
  // Rounds of several generations (of one target) in one target forward
  // (Backend::forward_batch): result i is bitwise what rounds[i].decoder's
  // verify() returns alone. Throws splitspec::Error, with every decoder
  // unchanged, if any round fails check_round(), a prefill asks for more
  // than prefill_left(), or the forward refuses.
  // A part of a generation's prefill: the next `tokens` of the tokens not yet
  // in its cache, short of the last (which its next round carries), so that
  // a long prompt runs in chunks between other sessions' rounds. The cache
  // ends up bitwise as one prefill would leave it.
  struct Prefill {
    TargetDecoder* decoder;
    int64_t tokens;
  };
  // With `emulation` on, the forward takes at least its modeled time for the
  // batch's rows, its layers (and so its taps) paced across it; forward_ms
  // reports that time.
  static std::vector<RoundResult> verify_batch(const std::vector<BatchRound>& rounds,
                                               const std::vector<Prefill>& prefills = {},
                                               const ForwardEmulation& emulation = {});
  // Tokens a Prefill may take now.
  int64_t prefill_left() const {
    return std::max<int64_t>(0, static_cast<int64_t>(seq_.size()) - cache_->size() - 1);
  }
  // What verify() checks before its forward: throws splitspec::Error if the
  // generation has finished or `tree` does not fit or is malformed.
  void check_round(const DraftTree& tree) const;
  // Rows the round's forward carries: the pending tokens plus the tree.
  int64_t round_rows(const DraftTree& tree) const {
    return static_cast<int64_t>(seq_.size()) - cache_->size() + tree.size();
  }
  // One autoregressive token: verify() of an empty tree.
  RoundResult step() { return verify(DraftTree{}); }

  bool finished() const { return finish_ != FinishReason::kNone; }
  FinishReason finish() const { return finish_; }
  // Most draft nodes the next round may carry without overrunning the context
  // or the cache's limit.
  int32_t room() const;
  const std::vector<int32_t>& sequence() const { return seq_; }
  int64_t generated() const { return static_cast<int64_t>(seq_.size()) - prompt_len_; }
  int64_t forwards() const { return forwards_; }
  // Bytes the KV cache holds now, and the most it will ever hold.
  size_t cache_bytes() const { return cache_->bytes(); }
  size_t reserved_bytes() const;
  const Backend& target() const { return target_; }

 private:
  // The round's forward: the tokens not yet in the cache plus the tree.
  ForwardRequest pending_request(const DraftTree& tree, const RoundRequest& request) const;
  // The round's verdict and extras from its logits, changing nothing.
  RoundResult judge_round(const DraftTree& tree, const ExtrasRequest& extras, const ForwardResult& out) const;
  // Commits a judged round: the cache compacted to the accepted path, the
  // tokens appended up to the first stop.
  void apply_round(RoundResult& r, int64_t past);
  // Grows the cache so the next forward's `rows` fit (see capacity_limit_).
  void reserve_rows(int64_t rows);
  void commit(RoundResult& r);
  void add_extras(RoundResult& r, const ForwardResult& out, const ExtrasRequest& want) const;
  // VerdictExtras::kv_rows: the entries the round left in the cache after `past`.
  void add_kv_rows(RoundResult& r, int64_t past, const ExtrasRequest& want) const;
  // This round's draws: keyed by the committed length, so that a generation
  // resumed from its committed tokens draws what it would have drawn.
  Rng round_rng() const { return Rng::keyed(options_.sampling.seed, static_cast<int64_t>(seq_.size())); }

  const Backend& target_;
  GenerateOptions options_;
  int64_t prompt_len_;
  int64_t context_;
  int64_t budget_;          // new tokens this generation may produce
  int64_t capacity_limit_;  // the most positions the cache may grow to
  int32_t max_tree_;        // draft nodes a round may carry (-1: the context bounds them)
  std::unique_ptr<KVStore> cache_;  // every committed token but the last (none before the first round)
  std::vector<int32_t> seq_;
  FinishReason finish_ = FinishReason::kNone;
  int64_t forwards_ = 0;
};

}  // namespace splitspec

#include "common/drafting/model_drafter.h"


#include <algorithm>

#include "common/drafting/drafter_options.h"
#include "common/drafting/registry.h"
#include "common/util/error.h"

namespace splitspec {

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

ModelDrafter::ModelDrafter(std::shared_ptr<const Model> draft) : draft_(std::move(draft)), cache_(draft_->new_cache()) {}

void ModelDrafter::on_begin(const std::vector<int32_t>& prompt) {
  if (params().gamma < 1) throw Error("gamma must be at least 1");
  prefill_draft(*draft_, cache_, prompt);
  seq_ = prompt;
}

DraftTree ModelDrafter::on_propose(int32_t budget, const std::function<bool()>& stop) {
  // The draft's own context bounds how far it can look ahead.
  const int32_t k = static_cast<int32_t>(
      std::min<int64_t>({params().gamma, budget, cache_.capacity() - static_cast<int64_t>(seq_.size())}));
  const SamplingParams& sampling = params().sampling;
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
    const ForwardResult out = draft_->forward(r, cache_);
    const float* row = out.logits.row(0);
    const int64_t V = out.logits.cols();
    if (sampling.greedy()) {
      tokens.push_back(greedy_token(row, V));  // greedy verification needs no q
    } else {
      Sample s = sample(row, V, sampling, rng());
      tokens.push_back(s.token);
      qs.push_back(std::move(s.q));
    }
    stats_.draft_forwards += 1;
  }
  // Drafted entries stay cached; accepting trims them to what was accepted.
  return DraftTree::chain(std::move(tokens), std::move(qs));
}

void ModelDrafter::on_accept(const RoundOutcome& o) {
  const int64_t committed = static_cast<int64_t>(seq_.size());
  // The cache keeps the last committed token and the accepted drafts.
  cache_.truncate(std::min<int64_t>(cache_.size(), committed + o.verdict.accepted));
  seq_.insert(seq_.end(), o.verdict.tokens.begin(), o.verdict.tokens.end());
}

std::unique_ptr<Drafter> ModelDrafter::fork() const {
  auto copy = std::make_unique<ModelDrafter>(draft_);
  copy->assign_state(*this);
  return copy;
}

void ModelDrafter::on_assign(const Drafter& other) {
  const auto& o = static_cast<const ModelDrafter&>(other);
  cache_.copy_prefix_from(o.cache_, o.cache_.size());
  seq_ = o.seq_;
}

void ModelDrafter::on_swap(Drafter& other) {
  auto& o = static_cast<ModelDrafter&>(other);
  std::swap(cache_, o.cache_);
  std::swap(seq_, o.seq_);
}

size_t ModelDrafter::memory_bytes() const { return cache_.bytes() + seq_.capacity() * sizeof(int32_t); }

std::unique_ptr<Drafter> make_model_drafter(const DrafterSpec& spec) {
  DrafterOptions("model", spec.options).finish();
  return std::make_unique<ModelDrafter>(spec.draft);
}

}  // namespace splitspec

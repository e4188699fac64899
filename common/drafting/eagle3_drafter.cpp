// `eagle3`: an EAGLE-3 head (eagle3_head.h) for its target, chained for
// gamma tokens a round as llama.cpp's draft-eagle3 runs it. Its decoder keeps
// its own KV cache, fed at every position k the pair (token x_{k+1}, g_k),
// g_k the fused inputs of three of the target's layers at k: the verifier
// sends those rows with each verdict (ExtrasRequest::hidden_rows with the
// head's layers: the prompt's with round one, then the root's and each
// accepted node's; a server in half precision). After a round the decoder
// has read every committed token but the first, so its last row already
// predicts the next round's first draft; later drafts read the decoder's
// own output as g. Drafted entries are dropped when the round is accepted.
//
// The rows go through half precision whatever the verifier, so a local run
// drafts exactly what an edge one does. Under sampling each draft is drawn
// from the head's softmax over its draft vocabulary (mapped to target ids)
// and carries it as q. With width W > 1 it drafts a tree of the head's W
// most probable paths a level, a level a forward under its mask
// (head_chain.h: one-hot q, exact under sampling too). The first round has no rows yet and drafts nothing.
#include <algorithm>
#include <cmath>

#include "common/drafting/drafter_options.h"
#include "common/drafting/eagle3_head.h"
#include "common/drafting/registry.h"
#include "common/kernels/kernels.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

class Eagle3Drafter final : public Drafter {
 public:
  Eagle3Drafter(std::shared_ptr<const Eagle3Head> head, int32_t width)
      : head_(std::move(head)), cache_(head_->new_cache()), width_(width) {
    stats_.drafter_counters["eagle3_head_bytes"] = static_cast<double>(head_->weight_bytes());
  }

  std::string name() const override { return "eagle3"; }
  ExtrasRequest wants() const override {
    ExtrasRequest e;
    e.hidden_rows = true;
    e.hidden_row_layers = head_->target_layers();
    return e;
  }
  size_t memory_bytes() const override {
    return cache_.bytes() + seq_.capacity() * sizeof(int32_t) + half_.capacity() * sizeof(uint16_t);
  }

 private:
  void on_begin(const std::vector<int32_t>& prompt) override {
    seq_ = prompt;
    cache_.truncate(0);
    next_ = {};
  }


  DraftTree on_propose(int32_t budget, const std::function<bool()>& stop) override {
    if (next_.logits.empty() || budget < 1) return {};
    const int32_t k = static_cast<int32_t>(
        std::min<int64_t>({params().gamma, budget, cache_.capacity() - cache_.size() + 1}));
    if (width_ > 1)
      return tree_from_head(
          next_, width_, budget, k, cache_.size(),
          [&](const std::vector<int32_t>& tokens, const Rows& g, std::vector<int64_t> positions, AttentionMask mask) {
            return head_->forward_tree(tokens, g, positions, mask, cache_);
          },
          stop, stats_.draft_forwards);
    return chain_from_head(
        next_, k, params().sampling, rng(),
        [&](int32_t token, const Rows& g) { return head_->forward({token}, g, cache_); }, stop, stats_.draft_forwards);
  }

  void on_accept(const RoundOutcome& o) override {
    // The decoder's entries: one per committed token but the first (entry k
    // reads token k + 1); the drafts' go.
    const int64_t fed = std::max<int64_t>(static_cast<int64_t>(seq_.size()) - 1, 0);
    cache_.truncate(std::min(cache_.size(), fed));
    const int64_t have_entries = cache_.size();
    const int64_t F = 3 * head_->target_hidden();
    const std::vector<float>& rows = o.extras.hidden_rows;
    if (rows.size() % static_cast<size_t>(F) != 0)
      throw Error("drafter eagle3: the verifier sent rows of another width than three target layers' " +
                  std::to_string(F));
    seq_.insert(seq_.end(), o.verdict.tokens.begin(), o.verdict.tokens.end());
    next_ = {};
    const int64_t end = static_cast<int64_t>(seq_.size()) - 1;  // entries wanted
    if (end <= have_entries) return;
    // Row 0 is the position of the round's first forwarded token; entry k
    // reads position k's row.
    const int64_t first = o.extras.hidden_rows_from;
    const int64_t n = end - have_entries, have = static_cast<int64_t>(rows.size()) / F;
    if (first > have_entries || have_entries - first + n > have)
      throw Error("drafter eagle3: the verifier sent " + std::to_string(have) + " rows from position " +
                  std::to_string(first) + "; the round needs positions " + std::to_string(have_entries) + " to " +
                  std::to_string(end - 1));
    Rows features(n, F);
    half_.resize(static_cast<size_t>(n * F));
    kernels::float_to_half(rows.data() + (have_entries - first) * F, n * F, half_.data());
    kernels::half_to_float(half_.data(), n * F, features.data());
    for (int64_t i = 0; i < n * F; ++i)
      if (!std::isfinite(features.data()[i])) throw Error("drafter eagle3: the verifier sent rows that are not finite");
    const Rows g = head_->fuse(features);
    next_ = head_->forward(std::vector<int32_t>(seq_.begin() + have_entries + 1, seq_.end()), g, cache_);
    stats_.draft_forwards += 1;
  }

  std::shared_ptr<const Eagle3Head> head_;
  KVCache cache_;
  std::vector<int32_t> seq_;  // committed tokens
  Eagle3Head::Step next_;     // the decoder's output after the last committed token
  std::vector<uint16_t> half_;
  int32_t width_ = 1;  // a tree's nodes a level
};

}  // namespace

std::unique_ptr<Drafter> make_eagle3_drafter(const DrafterSpec& spec) {
  DrafterOptions opt("eagle3", spec.options);
  const std::string path = opt.text("head", "");
  const std::string target = opt.text("target", spec.target_path);
  const int width = opt.integer("width", 1);
  opt.finish();
  if (path.empty()) throw Error("drafter eagle3: no head: give its GGUF file (option head=FILE.gguf)");
  if (width < 1 || width > 16) throw Error("drafter eagle3: width must be in [1, 16], got " + std::to_string(width));
  if (!spec.state->value) {
    auto head = Eagle3Head::load(path, target);
    if (spec.vocab_size > 0 && head->target_vocab() != spec.vocab_size)
      throw Error("drafter eagle3: " + path + " drafts over a vocabulary of " + std::to_string(head->target_vocab()) +
                  "; the target's is " + std::to_string(spec.vocab_size));
    if (spec.hidden_size > 0 && head->target_hidden() != spec.hidden_size)
      throw Error("drafter eagle3: " + path + " reads target layers of width " + std::to_string(head->target_hidden()) +
                  "; the target's hidden size is " + std::to_string(spec.hidden_size));
    spec.state->value = std::const_pointer_cast<Eagle3Head>(head);
  }
  return std::make_unique<Eagle3Drafter>(std::static_pointer_cast<const Eagle3Head>(spec.state->value), width);
}

}  // namespace splitspec

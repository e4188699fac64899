// `mtp`: the model's own multi-token-prediction block (mtp_head.h), chained
// for gamma tokens a round as the model was trained, as llama.cpp's
// draft-mtp runs it; no draft model to train or ship. The block keeps its
// own KV cache over every position, fed the target's hidden state after the
// final norm at each: the verifier sends them with each verdict
// (ExtrasRequest::hidden_rows: the prompt's with round one, then the root's
// and each accepted node's; a server in half precision). Each committed token
// x_q enters the block paired with h_{q-1} (zeros for the first), so after a
// round the block has read every committed token and its last row already
// predicts the next round's first draft; later drafts read the block's own
// h'. Drafted entries are dropped when the round is accepted.
//
// The hidden rows go through half precision whatever the verifier, so a
// local run drafts exactly what an edge one does.
//
// Under sampling each draft is drawn from the block's softmax and carries it
// as q; greedy drafts are the block's argmax. With width W > 1 the block
// drafts a tree, W nodes a level to gamma levels: the W most probable paths
// under the block (head_chain.h), so it branches wherever it is least sure,
// verified as one (nodes chosen deterministically, so verified as one-hot
// q, exact under sampling too). The first round has no hidden rows yet and drafts nothing.
// With a shortlist (shortlist.h) the block's h' is scored against the K
// most frequent tokens alone, and the head matrix is never read.
#include <algorithm>
#include <cmath>

#include "common/drafting/drafter_options.h"
#include "common/drafting/mtp_head.h"
#include "common/decoding/token_tree.h"
#include "common/drafting/registry.h"
#include "common/drafting/shortlist_options.h"
#include "common/kernels/kernels.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

class MtpDrafter final : public Drafter {
 public:
  MtpDrafter(std::shared_ptr<const MtpHead> head, std::shared_ptr<const Shortlist> shortlist, int32_t width)
      : head_(std::move(head)), shortlist_(std::move(shortlist)), cache_(head_->new_cache()), width_(width) {
    // With a shortlist the head matrix is never read: its rows held are.
    stats_.drafter_counters["mtp_head_bytes"] =
        static_cast<double>(shortlist_ ? head_->weight_bytes() - head_->head_bytes() + shortlist_->bytes()
                                       : head_->weight_bytes());
    if (shortlist_) stats_.drafter_counters["mtp_shortlist_tokens"] = static_cast<double>(shortlist_->size());
  }

  std::string name() const override { return "mtp"; }
  ExtrasRequest wants() const override {
    ExtrasRequest e;
    e.hidden_rows = true;
    return e;
  }
  size_t memory_bytes() const override {
    return cache_.bytes() + (seq_.capacity() + 2 * half_.capacity()) * sizeof(int32_t);
  }

 private:
  void on_begin(const std::vector<int32_t>& prompt) override {
    seq_ = prompt;
    cache_.truncate(0);
    fed_ = 0;
    next_ = {};
  }


  DraftTree on_propose(int32_t budget, const std::function<bool()>& stop) override {
    if (next_.logits.empty() || budget < 1) return {};
    if (width_ > 1) {
      // A level's nodes go through the block in one forward under the tree's mask.
      const int64_t room = cache_.capacity() - cache_.size();
      return tree_from_head(
          next_, width_, budget, static_cast<int32_t>(std::min<int64_t>(params().gamma, room)), fed_,
          [&](const std::vector<int32_t>& tokens, const Rows& h, std::vector<int64_t> positions, AttentionMask mask) {
            return scored(head_->forward_tree(tokens, h, std::move(positions), std::move(mask), cache_, !shortlist_));
          },
          stop, stats_.draft_forwards);
    }
    const int32_t k = static_cast<int32_t>(
        std::min<int64_t>({params().gamma, budget, cache_.capacity() - static_cast<int64_t>(seq_.size()) + 1}));
    return chain_from_head(
        next_, k, params().sampling, rng(),
        [&](int32_t token, const Rows& h) { return scored(head_->forward({token}, h, cache_, !shortlist_)); }, stop,
        stats_.draft_forwards);
  }

  // A step's logits: the head's, or the shortlist's over its h'.
  MtpHead::Step scored(MtpHead::Step step) const {
    if (shortlist_) step.logits = shortlist_->logits(step.hidden, head_->target_config().vocab_size);
    return step;
  }

  void on_accept(const RoundOutcome& o) override {
    cache_.truncate(fed_);  // the drafts' entries
    const int64_t H = head_->target_config().hidden_size;
    const std::vector<float>& rows = o.extras.hidden_rows;
    if (rows.size() % static_cast<size_t>(H) != 0)
      throw Error("drafter mtp: the verifier sent hidden rows of another size than the target's " + std::to_string(H));
    // Row 0 is the position of the round's first forwarded token (the
    // prompt's first in round one, else the last token committed before).
    const int64_t first = o.extras.hidden_rows_from;
    if (fed_ > 0 && first > fed_ - 1)
      throw Error("drafter mtp: the verifier's hidden rows start at position " + std::to_string(first) +
                  "; the block needs position " + std::to_string(fed_ - 1) + "'s");
    seq_.insert(seq_.end(), o.verdict.tokens.begin(), o.verdict.tokens.end());
    const int64_t end = static_cast<int64_t>(seq_.size());
    const int64_t have = static_cast<int64_t>(rows.size()) / H;
    next_ = {};
    if (end <= fed_) return;
    if (end - 2 - first >= have)
      throw Error("drafter mtp: the verifier sent " + std::to_string(have) + " hidden rows; the round needs " +
                  std::to_string(end - 1 - first));
    // Entry q pairs token q with the hidden state of position q - 1.
    const int64_t n = end - fed_;
    Rows h(n, H);
    for (int64_t q = fed_; q < end; ++q) {
      float* dst = h.row(q - fed_);
      if (q == 0) {
        std::fill(dst, dst + H, 0.0f);
        continue;
      }
      half_.resize(static_cast<size_t>(H));
      kernels::float_to_half(rows.data() + (q - 1 - first) * H, H, half_.data());
      kernels::half_to_float(half_.data(), H, dst);
      for (int64_t j = 0; j < H; ++j)
        if (!std::isfinite(dst[j])) throw Error("drafter mtp: the verifier sent a hidden state that is not finite");
    }
    next_ = scored(head_->forward(std::vector<int32_t>(seq_.begin() + fed_, seq_.end()), h, cache_, !shortlist_));
    fed_ = end;
    stats_.draft_forwards += 1;
  }

  std::shared_ptr<const MtpHead> head_;
  std::shared_ptr<const Shortlist> shortlist_;  // null: the whole vocabulary
  KVCache cache_;
  int32_t width_ = 1;  // a tree's nodes a level
  std::vector<int32_t> seq_;  // committed tokens
  int64_t fed_ = 0;           // of them, the block's cache holds the first fed_
  MtpHead::Step next_;        // the block's output after the last committed token
  std::vector<uint16_t> half_;
};

}  // namespace

// What the drafters of one spec share: the head, and the shortlist its
// options ask for.
struct MtpShared {
  std::shared_ptr<const MtpHead> head;
  std::shared_ptr<const Shortlist> shortlist;
};

std::unique_ptr<Drafter> make_mtp_drafter(const DrafterSpec& spec) {
  DrafterOptions opt("mtp", spec.options);
  const std::string path = opt.text("head", spec.target_path);
  const int width = opt.integer("width", 1);
  if (width < 1 || width > 16) throw Error("drafter mtp: width must be in [1, 16], got " + std::to_string(width));
  if (path.empty())
    throw Error("drafter mtp: no model file: give the target's GGUF file (option head), or run it with the target "
                "local or as the tokenizer");
  if (!spec.state->value) {
    auto shared = std::make_shared<MtpShared>();
    shared->head = MtpHead::load(path);
    const ModelConfig& c = shared->head->target_config();
    if (spec.vocab_size > 0 && c.vocab_size != spec.vocab_size)
      throw Error("drafter mtp: " + path + " has a vocabulary of " + std::to_string(c.vocab_size) +
                  "; the target's is " + std::to_string(spec.vocab_size));
    if (spec.hidden_size > 0 && c.hidden_size != spec.hidden_size)
      throw Error("drafter mtp: " + path + " has hidden size " + std::to_string(c.hidden_size) +
                  "; the target's is " + std::to_string(spec.hidden_size));
    shared->shortlist = shortlist_from_options(opt, "mtp", path, c.vocab_size,
                                               [&](const std::vector<int64_t>& ids) { return shared->head->head_rows(ids); });
    opt.finish();
    spec.state->value = shared;
  }
  const auto& shared = *std::static_pointer_cast<const MtpShared>(spec.state->value);
  return std::make_unique<MtpDrafter>(shared.head, shared.shortlist, width);
}

}  // namespace splitspec

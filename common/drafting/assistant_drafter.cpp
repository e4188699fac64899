// `assistant`: Gemma 4's assistant (assistant_head.h) for its target,
// chained for gamma tokens a round as llama.cpp's draft path over shared
// memory runs it; no draft model to train. It keeps no keys of its own: it
// attends over the target's, of the target's last local and global layers.
// The verifier hands it, with each verdict, the rows the round committed
// to those layers (ExtrasRequest::kv_row_layers) and the target's hidden
// state at the row that produced the last committed token (hidden), which
// with that token gives the first draft; each later draft reads the one
// before and the assistant's own projected-out state, at the same position.
//
// The target's keys stay where the target is: a server does not send them,
// so the assistant runs beside a local target (docs/draft-heads.md says what
// sending them would cost). Under sampling each draft is drawn from the
// assistant's softmax and carries it as q. With width W > 1 it drafts a tree
// of its W most probable paths a level (head_chain.h): deterministic nodes
// (one-hot q, exact under sampling too). The first
// round has no keys yet and drafts nothing.
#include <algorithm>
#include <cmath>

#include "common/drafting/assistant_head.h"
#include "common/drafting/drafter_options.h"
#include "common/drafting/registry.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

class AssistantDrafter final : public Drafter {
 public:
  AssistantDrafter(std::shared_ptr<const AssistantHead> head, int32_t width)
      : head_(std::move(head)), store_(head_->new_store()), width_(width) {
    stats_.drafter_counters["assistant_bytes"] = static_cast<double>(head_->weight_bytes());
  }

  std::string name() const override { return "assistant"; }
  ExtrasRequest wants() const override {
    ExtrasRequest e;
    e.hidden = true;
    e.kv_row_layers = head_->target_kv_layers();
    return e;
  }
  size_t memory_bytes() const override { return store_.bytes() + seq_.capacity() * sizeof(int32_t); }

 private:
  void on_begin(const std::vector<int32_t>& prompt) override {
    seq_ = prompt;
    store_.truncate(0);
    hidden_ = Rows();
  }

  // The first draft's step: the last committed token with the target's row.
  DraftTree on_propose(int32_t budget, const std::function<bool()>& stop) override {
    if (hidden_.empty() || budget < 1) return {};
    const int64_t pos = static_cast<int64_t>(seq_.size()) - 1;
    const HeadStep first = head_->forward({seq_.back()}, hidden_.view(), pos, store_);
    stats_.draft_forwards += 1;
    const int32_t k = static_cast<int32_t>(std::min<int64_t>(params().gamma, budget));
    auto step = [&](int32_t token, const Rows& h) { return head_->forward({token}, h.view(), pos, store_); };
    if (width_ <= 1) return chain_from_head(first, k, params().sampling, rng(), step, stop, stats_.draft_forwards);
    // Every node is at `pos`, over the target's keys alone: a level needs no mask.
    return tree_from_head(
        first, width_, budget, k, 0,
        [&](const std::vector<int32_t>& tokens, const Rows& h, std::vector<int64_t>, AttentionMask) {
          return head_->forward(tokens, h.view(), pos, store_);
        },
        stop, stats_.draft_forwards);
  }

  void on_accept(const RoundOutcome& o) override {
    const std::vector<int32_t>& layers = head_->target_kv_layers();
    const KVCache& s = store_;
    // One position's floats: each layer's keys, then its values.
    int64_t width = 0;
    for (int64_t j = 0; j < static_cast<int64_t>(layers.size()); ++j) width += 2 * s.layer_kv_width(j);
    const std::vector<float>& rows = o.extras.kv_rows;
    if (rows.size() % static_cast<size_t>(width) != 0)
      throw Error("drafter assistant: the verifier sent key rows of another width than the target's layers' " +
                  std::to_string(width));
    const int64_t from = o.extras.kv_rows_from, n = static_cast<int64_t>(rows.size()) / width;
    if (from > store_.size()) throw Error("drafter assistant: the verifier sent keys from position " +
                                          std::to_string(from) + " past the " + std::to_string(store_.size()) + " held");
    store_.truncate(from);
    store_.reserve(from + n);
    for (int64_t j = 0, at = 0; j < static_cast<int64_t>(layers.size()); ++j) {
      const int64_t w = s.layer_kv_width(j);
      std::vector<float> k(static_cast<size_t>(n * w)), v(static_cast<size_t>(n * w));
      for (int64_t i = 0; i < n; ++i) {
        std::copy_n(rows.begin() + i * width + at, w, k.begin() + i * w);
        std::copy_n(rows.begin() + i * width + at + w, w, v.begin() + i * w);
      }
      for (const std::vector<float>* rows_of : {&k, &v})
        for (float x : *rows_of)
          if (!std::isfinite(x)) throw Error("drafter assistant: the verifier sent keys or values that are not finite");
      store_.write_rows(j, k.data(), v.data(), n);
      at += 2 * w;
    }
    store_.commit(n);
    // What these rows would cost on a wire, in half precision (docs/draft-heads.md).
    stats_.drafter_counters["target_kv_bytes_f16"] += static_cast<double>(rows.size() * sizeof(uint16_t));
    seq_.insert(seq_.end(), o.verdict.tokens.begin(), o.verdict.tokens.end());
    hidden_ = Rows();
    if (o.extras.hidden.empty()) return;
    if (static_cast<int64_t>(o.extras.hidden.size()) != head_->target_hidden())
      throw Error("drafter assistant: the verifier sent a hidden state of " + std::to_string(o.extras.hidden.size()) +
                  " values; the target's hidden size is " + std::to_string(head_->target_hidden()));
    // A round that ends the generation commits fewer tokens than it keeps keys of.
    const int64_t before_last = static_cast<int64_t>(seq_.size()) - 1;
    if (store_.size() > before_last) store_.truncate(before_last);
    if (store_.size() != before_last)
      throw Error("drafter assistant: the target's keys cover " + std::to_string(store_.size()) + " positions of the " +
                  std::to_string(seq_.size() - 1) + " committed before the last token");
    hidden_ = Rows(1, head_->target_hidden());
    std::copy(o.extras.hidden.begin(), o.extras.hidden.end(), hidden_.row(0));
  }

  std::shared_ptr<const AssistantHead> head_;
  KVCache store_;             // the target's keys and values of the two layers, every committed position but the last
  std::vector<int32_t> seq_;  // committed tokens
  Rows hidden_;               // the target's hidden state that predicted the last committed token
  int32_t width_ = 1;
};

}  // namespace

std::unique_ptr<Drafter> make_assistant_drafter(const DrafterSpec& spec) {
  DrafterOptions opt("assistant", spec.options);
  const std::string path = opt.text("head", "");
  const std::string target = opt.text("target", spec.target_path);
  const int width = opt.integer("width", 1);
  opt.finish();
  if (path.empty()) throw Error("drafter assistant: no assistant: give its GGUF file (option head=FILE.gguf)");
  if (width < 1 || width > 16) throw Error("drafter assistant: width must be in [1, 16], got " + std::to_string(width));
  if (!spec.state->value) {
    auto head = AssistantHead::load(path, target);
    if (spec.vocab_size > 0 && head->vocab() != spec.vocab_size)
      throw Error("drafter assistant: " + path + " drafts over a vocabulary of " + std::to_string(head->vocab()) +
                  "; the target's is " + std::to_string(spec.vocab_size));
    if (spec.hidden_size > 0 && head->target_hidden() != spec.hidden_size)
      throw Error("drafter assistant: " + path + " reads a target hidden state of " +
                  std::to_string(head->target_hidden()) + "; the target's is " + std::to_string(spec.hidden_size));
    spec.state->value = std::const_pointer_cast<AssistantHead>(head);
  }
  return std::make_unique<AssistantDrafter>(std::static_pointer_cast<const AssistantHead>(spec.state->value), width);
}

}  // namespace splitspec

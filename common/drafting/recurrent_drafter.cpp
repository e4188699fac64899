// `recurrent`: ReDrafter. The verifier sends the target's final hidden state
// at the last accepted position with each verdict (locally from the
// verification forward; from a server, in half precision); the head
// (recurrent_head.h) runs a beam search from it and the target's last token,
// and the deduplicated beams (beam_search.h) are the next round's tree.
//
// Exact under sampling: the beams are chosen deterministically, so every node
// is verified as one-hot q, siblings by the multi-candidate residual rule
// (verify.h). Apple's reference instead uses the head's softmax as q for
// deterministic beams, which is not exact at temperature > 0.
//
// The first round of a generation has no hidden state yet (the prompt's last
// token is not through the target until that round), so it drafts nothing.
//
// Pre-drafting: a server's early verdict carries its exit's hidden state
// (the adapted layer after the final norm), and a fork drafts the next round
// from it. On the demo target, trees drafted from exit 5's hidden state
// accept 97% of what trees from the final one do (docs/drafters.md).
#include <cmath>

#include "common/drafting/beam_search.h"
#include "common/drafting/drafter_options.h"
#include "common/drafting/recurrent_head.h"
#include "common/drafting/registry.h"
#include "common/kernels/kernels.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

class RecurrentDrafter final : public Drafter {
 public:
  RecurrentDrafter(std::shared_ptr<const RecurrentHead> head, int32_t width, int32_t length)
      : head_(std::move(head)), width_(width), length_(length) {
    stats_.drafter_counters["recurrent_head_bytes"] = static_cast<double>(head_->weight_bytes());
  }

  std::string name() const override { return "recurrent"; }
  ExtrasRequest wants() const override { return {0, true}; }
  size_t memory_bytes() const override { return (h_.capacity() + half_.capacity() / 2) * sizeof(float); }

  bool can_fork() const override { return true; }
  std::unique_ptr<Drafter> fork() const override {
    auto copy = std::make_unique<RecurrentDrafter>(head_, width_, length_);
    copy->assign_state(*this);
    return copy;
  }

 private:
  void on_begin(const std::vector<int32_t>& prompt) override {
    last_ = prompt.back();
    have_h_ = false;
  }

  DraftTree on_propose(int32_t budget, const std::function<bool()>&) override {
    if (!have_h_ || budget < 1) return {};
    const int32_t length = std::min(length_, budget);
    const Beams beams = beam_search(*head_, h_.data(), last_, width_, length);
    DraftTree tree = beams_to_tree(beams.tokens);
    stats_.drafter_counters["recurrent_beam_tokens"] += static_cast<double>(width_) * length;
    stats_.drafter_counters["recurrent_tree_nodes"] += tree.size();
    stats_.draft_forwards += length;
    if (tree.size() > budget) tree.truncate(budget);
    return tree;
  }

  void on_accept(const RoundOutcome& outcome) override {
    if (outcome.verdict.tokens.empty()) return;
    last_ = outcome.verdict.tokens.back();
    const std::vector<float>& h = outcome.extras.hidden;
    have_h_ = false;
    if (h.empty()) return;
    const int64_t H = head_->config().hidden_size;
    if (static_cast<int64_t>(h.size()) != H)
      throw Error("drafter recurrent: the verifier sent a hidden state of " + std::to_string(h.size()) +
                  " values; the head reads " + std::to_string(H));
    // Through half precision whatever the verifier: a server sends it so,
    // and a local run then drafts exactly what an edge one does.
    half_.resize(static_cast<size_t>(H));
    h_.resize(static_cast<size_t>(H));
    kernels::float_to_half(h.data(), H, half_.data());
    kernels::half_to_float(half_.data(), H, h_.data());
    for (float x : h_)
      if (!std::isfinite(x)) throw Error("drafter recurrent: the verifier sent a hidden state that is not finite");
    have_h_ = true;
  }

  void on_assign(const Drafter& other) override {
    const auto& o = static_cast<const RecurrentDrafter&>(other);
    last_ = o.last_;
    have_h_ = o.have_h_;
    h_ = o.h_;
  }
  void on_swap(Drafter& other) override {
    auto& o = static_cast<RecurrentDrafter&>(other);
    std::swap(last_, o.last_);
    std::swap(have_h_, o.have_h_);
    std::swap(h_, o.h_);
  }

  std::shared_ptr<const RecurrentHead> head_;
  int32_t width_, length_;
  int32_t last_ = 0;
  bool have_h_ = false;
  std::vector<float> h_;
  std::vector<uint16_t> half_;
};

}  // namespace

std::unique_ptr<Drafter> make_recurrent_drafter(const DrafterSpec& spec) {
  DrafterOptions opt("recurrent", spec.options);
  const std::string path = opt.text("head", spec.target_dir);
  // Defaults from bench drafters on the demo target (docs/recurrent-drafter.md):
  // in memory every node and every beam costs compute, so one short beam;
  // streamed weights make nodes nearly free; a round trip is worth a middling
  // tree, two beams doing as well as four at 10 ms and better at 0 ms.
  int width = 2, length = 4;
  switch (spec.verify_cost) {
    case VerifyCost::kCompute: width = 1, length = 3; break;
    case VerifyCost::kWeightReads: width = 4, length = 4; break;
    case VerifyCost::kRoundTrip: break;
  }
  width = opt.integer("width", width);
  length = opt.integer("length", length);
  opt.finish();
  if (width < 1 || width > 64) throw Error("drafter recurrent: width must be in [1, 64], got " + std::to_string(width));
  if (length < 1 || length > 64) throw Error("drafter recurrent: length must be in [1, 64], got " + std::to_string(length));
  if (path.empty())
    throw Error("drafter recurrent: no head: give its directory or file (option head, e.g. models/demo-target); by "
                "default it is looked for in the local target's directory, or the tokenizer's");
  if (spec.vocab_size < 1) throw Error("drafter recurrent: the target's vocabulary size is unknown");
  // One head per client, loaded once.
  if (!spec.state->value) {
    auto head = std::make_shared<RecurrentHead>(RecurrentHead::load(path));
    head->check_target(spec.hidden_size > 0 ? spec.hidden_size : head->config().hidden_size, spec.vocab_size,
                       spec.tokenizer_fingerprint);
    spec.state->value = head;
  }
  return std::make_unique<RecurrentDrafter>(std::static_pointer_cast<const RecurrentHead>(spec.state->value), width,
                                            length);
}

}  // namespace splitspec

// `pld`: prompt lookup decoding, the model-free baseline of the ecosystem
// (llama.cpp's lookup decoding, Hugging Face's prompt_lookup_num_tokens):
// find the latest earlier occurrence of the last n tokens in the prompt and
// the generated text (n from `ngram_max` down to `ngram_min`) and propose the
// tokens that followed it, as a chain. Chosen, not sampled: no q.
#include <algorithm>

#include "common/drafting/drafter_options.h"
#include "common/drafting/registry.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

class PldDrafter final : public Drafter {
 public:
  PldDrafter(int32_t ngram_min, int32_t ngram_max, int32_t tokens)
      : ngram_min_(ngram_min), ngram_max_(ngram_max), tokens_(tokens) {}

  std::string name() const override { return "pld"; }
  size_t memory_bytes() const override { return history_.capacity() * sizeof(int32_t); }

 private:
  void on_begin(const std::vector<int32_t>& prompt) override { history_ = prompt; }

  DraftTree on_propose(int32_t budget, const std::function<bool()>&) override {
    const int32_t want = std::min(budget, tokens_ > 0 ? tokens_ : params().gamma);
    const int64_t len = static_cast<int64_t>(history_.size());
    for (int32_t n = std::min<int64_t>(ngram_max_, len - 1); n >= ngram_min_; --n) {
      const auto suffix = history_.end() - n;
      // Latest match first: recent text predicts best.
      for (int64_t start = len - n - 1; start >= 0; --start) {
        if (!std::equal(suffix, history_.end(), history_.begin() + start)) continue;
        const int64_t from = start + n;
        const int64_t take = std::min<int64_t>(want, len - from);
        if (take <= 0) continue;
        stats_.drafter_counters["pld_matches"] += 1;
        return DraftTree::chain(std::vector<int32_t>(history_.begin() + from, history_.begin() + from + take));
      }
    }
    return {};
  }

  void on_accept(const RoundOutcome& outcome) override {
    history_.insert(history_.end(), outcome.verdict.tokens.begin(), outcome.verdict.tokens.end());
  }

  const int32_t ngram_min_, ngram_max_, tokens_;
  std::vector<int32_t> history_;
};

}  // namespace

std::unique_ptr<Drafter> make_pld_drafter(const DrafterSpec& spec) {
  DrafterOptions opt("pld", spec.options);
  const int ngram_min = opt.integer("ngram_min", 1);
  const int ngram_max = opt.integer("ngram_max", 3);
  const int tokens = opt.integer("tokens", 0);
  opt.finish();
  if (ngram_min < 1 || ngram_max < ngram_min)
    throw Error("drafter pld: need 1 <= ngram_min <= ngram_max, got " + std::to_string(ngram_min) + " and " +
                std::to_string(ngram_max));
  if (tokens < 0) throw Error("drafter pld: tokens must be >= 0 (0: gamma)");
  return std::make_unique<PldDrafter>(ngram_min, ngram_max, tokens);
}

}  // namespace splitspec

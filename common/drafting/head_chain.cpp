#include "common/drafting/head_chain.h"

#include <utility>
#include <vector>

namespace splitspec {

DraftTree chain_from_head(const HeadStep& first, int32_t k, const SamplingParams& sampling, Rng& rng,
                          const std::function<HeadStep(int32_t token, const Rows& hidden)>& step,
                          const std::function<bool()>& stop, int64_t& forwards) {
  const int64_t vocab = first.logits.cols();
  std::vector<int32_t> tokens;
  std::vector<Distribution> qs;
  auto choose = [&](const float* logits) {
    if (sampling.greedy()) return tokens.push_back(greedy_token(logits, vocab));
    Sample s = sample(logits, vocab, sampling, rng);
    tokens.push_back(s.token);
    qs.push_back(std::move(s.q));
  };
  choose(first.logits.row(0));
  Rows hidden = first.hidden;
  for (int32_t i = 1; i < k; ++i) {
    if (stop && stop()) break;
    HeadStep next = step(tokens.back(), hidden);
    choose(next.logits.row(0));
    hidden = std::move(next.hidden);
    forwards += 1;
  }
  return DraftTree::chain(std::move(tokens), std::move(qs));
}

}  // namespace splitspec

// Exactness of in-process chain speculation (the loop `eval acceptance` runs):
// greedy output is the target's own, token for token; sampled output follows
// the target's distribution.
#include "client/speculative_chain.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "client/local_ar.h"
#include "common/util/error.h"
#include "tests/test_util.h"

namespace splitspec::test {

TEST(SpeculativeChain, GreedyEqualsTargetAloneForEveryGamma) {
  auto target = Model::random(tiny_config(50, 2), 41);
  auto draft = noisy_copy(*target, 0.004, 1);
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.ignore_eos = true;
  std::mt19937 g(3);
  double total_accepted = 0, rounds = 0;
  for (int p = 0; p < 8; ++p) {
    std::vector<int32_t> prompt = {1};
    for (int i = 0; i < 1 + p; ++i) prompt.push_back(static_cast<int32_t>(g() % 50));
    const auto reference = generate_local_ar(*target, prompt, o).output_ids;
    for (int gamma = 1; gamma <= 8; ++gamma) {
      const auto r = generate_speculative_chain(*target, *draft, prompt, o, gamma);
      ASSERT_EQ(r.generation.output_ids, reference) << "prompt " << p << " gamma " << gamma;
      for (auto a : r.spec.draft.accepted) total_accepted += a;
      rounds += r.spec.rounds;
    }
  }
  EXPECT_GT(total_accepted / rounds, 0.3) << "the draft should be accepted sometimes";
}

TEST(SpeculativeChain, StopsAtEosAndAtContextEnd) {
  auto target = Model::random(tiny_config(50, 2), 42);
  auto draft = noisy_copy(*target, 0.02, 2);
  GenerateOptions o;
  o.max_new_tokens = 1000;
  o.ignore_eos = true;
  const auto full = generate_speculative_chain(*target, *draft, {1, 2}, o, 4);
  EXPECT_EQ(full.generation.output_ids.size(), 62u) << "context 64";
  EXPECT_EQ(full.generation.output_ids, generate_local_ar(*target, {1, 2}, o).output_ids);
  o.ignore_eos = false;
  ModelConfig c = target->config();
  c.eos_token_id = full.generation.output_ids[5];
  auto eos_target = Model::from_weights(c, target->weights(), "eos");
  const auto stopped = generate_speculative_chain(*eos_target, *draft, {1, 2}, o, 4);
  const auto ref = generate_local_ar(*eos_target, {1, 2}, o);
  EXPECT_EQ(stopped.generation.output_ids, ref.output_ids);
  EXPECT_EQ(stopped.generation.finish_reason, "eos");
}

TEST(SpeculativeChain, SampledFirstTokensFollowTheTarget) {
  // Chi-square test (alpha 1e-4) of the first two generated tokens against
  // the target's own distribution, over many seeds.
  auto target = Model::random(tiny_config(12, 1), 43);
  auto draft = noisy_copy(*target, 0.5, 3);
  GenerateOptions o;
  o.max_new_tokens = 2;
  o.ignore_eos = true;
  o.sampling.temperature = 1.0f;
  const std::vector<int32_t> prompt = {1, 5, 7};
  // The target's distribution of the first token, and of the second given
  // the first is 0 (most runs condition on some first token; pick the mode).
  KVCache cache = target->new_cache();
  ForwardRequest r;
  r.tokens = prompt;
  r.logits_rows = std::vector<int64_t>{2};
  const Distribution p0 = filtered_distribution(target->forward(r, cache).logits[0], o.sampling);
  const int32_t mode = static_cast<int32_t>(std::max_element(p0.begin(), p0.end()) - p0.begin());
  r.tokens = {mode};
  r.logits_rows = std::vector<int64_t>{0};
  const Distribution p1 = filtered_distribution(target->forward(r, cache).logits[0], o.sampling);
  std::vector<int64_t> first(12, 0), second(12, 0);
  for (uint64_t seed = 0; seed < 6000; ++seed) {
    o.sampling.seed = seed;
    const auto out = generate_speculative_chain(*target, *draft, prompt, o, 3).generation.output_ids;
    first[out[0]]++;
    if (out[0] == mode) second[out[1]]++;
  }
  EXPECT_GT(goodness_of_fit_pvalue(first, std::vector<double>(p0.begin(), p0.end())), 1e-4);
  EXPECT_GT(goodness_of_fit_pvalue(second, std::vector<double>(p1.begin(), p1.end())), 1e-4);
}

TEST(SpeculativeChainBadInput, MismatchedVocabulariesAndBadGamma) {
  auto target = Model::random(tiny_config(50, 1), 1);
  auto draft = Model::random(tiny_config(60, 1), 2);
  GenerateOptions o;
  EXPECT_THROW(generate_speculative_chain(*target, *draft, {1}, o, 4), Error);
  EXPECT_THROW(generate_speculative_chain(*target, *target, {1}, o, 0), Error);
  EXPECT_THROW(generate_speculative_chain(*target, *target, {}, o, 2), Error);
  EXPECT_THROW(generate_speculative_chain(*target, *target, {1, 70}, o, 2), Error);
}

}  // namespace splitspec::test

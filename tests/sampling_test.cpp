#include "common/decoding/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>
#include <set>

#include "common/drafting/drafter.h"
#include "common/util/error.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {
// The decoding functions on a vector of logits.
Distribution filtered_distribution(const std::vector<float>& logits, const SamplingParams& p) {
  return splitspec::filtered_distribution(logits.data(), static_cast<int64_t>(logits.size()), p);
}
Sample sample(const std::vector<float>& logits, const SamplingParams& p, Rng& rng) {
  return splitspec::sample(logits.data(), static_cast<int64_t>(logits.size()), p, rng);
}
int support(const Distribution& d) {
  return static_cast<int>(std::count_if(d.begin(), d.end(), [](float x) { return x > 0; }));
}
}  // namespace

// Every round's stream, the verifier's and the drafter's, at every position,
// is its own: none starts where another does (an aliasing that once made the
// drafter's stream at one position the verifier's at the next for seed 0).
TEST(Sampling, KeyedStreamsOfVerifierAndDrafterNeverAlias) {
  std::set<uint64_t> firsts;
  size_t streams = 0;
  for (uint64_t seed : {0ull, 1ull, 2ull, 8ull, 10ull, 42ull, 12345ull, ~0ull})
    for (uint64_t s : {seed, draft_seed(seed)})
      for (int64_t position = 0; position < 600; ++position) {
        Rng r = Rng::keyed(s, position);
        firsts.insert(static_cast<uint64_t>(r.uniform() * 9007199254740992.0));
        streams += 1;
      }
  EXPECT_EQ(firsts.size(), streams);
  // And a stream is a function of its key alone.
  Rng a = Rng::keyed(7, 100), b = Rng::keyed(7, 100);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.uniform(), b.uniform());
}

TEST(Sampling, GreedyIsOneHotOnFirstMaximum) {
  SamplingParams p;
  const std::vector<float> logits = {1, 3, 3, 0};
  const auto d = filtered_distribution(logits, p);
  EXPECT_EQ(d, (Distribution{0, 1, 0, 0}));
  Rng rng(1);
  EXPECT_EQ(sample(logits, p, rng).token, 1);
}

TEST(Sampling, TemperatureIsSoftmaxOfScaledLogits) {
  SamplingParams p;
  p.temperature = 2.0f;
  const auto d = filtered_distribution({0, 2, 4}, p);
  const std::vector<float> scaled = {0, 1, 2};
  const std::vector<double> ref = reference_softmax(scaled.data(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(d[i], ref[i], 1e-6);
}

// With every token a candidate (top_k 0 or the whole vocabulary, top_p 1)
// the distribution is the plain softmax, computed without sorting the
// vocabulary, and equals the filtered road's (top_p just under 1 keeps them
// all but sorts) to float precision.
TEST(Sampling, AllCandidatesIsTheSoftmaxWithoutASort) {
  std::vector<float> lg(5000);
  for (size_t i = 0; i < lg.size(); ++i) lg[i] = 3.0f * std::sin(0.11f * static_cast<float>(i));
  SamplingParams all;
  all.temperature = 0.7f;
  SamplingParams whole = all;
  whole.top_k = static_cast<int32_t>(lg.size());
  SamplingParams sorted = all;
  sorted.top_p = 0.99999994f;  // the largest float below 1
  const Distribution a = filtered_distribution(lg.data(), static_cast<int64_t>(lg.size()), all);
  const Distribution b = filtered_distribution(lg.data(), static_cast<int64_t>(lg.size()), whole);
  const Distribution c = filtered_distribution(lg.data(), static_cast<int64_t>(lg.size()), sorted);
  const std::vector<double> ref = reference_softmax(lg.data(), static_cast<int64_t>(lg.size()), 0.7);
  EXPECT_EQ(a, b);
  double total = 0.0;
  for (size_t i = 0; i < lg.size(); ++i) {
    EXPECT_NEAR(a[i], ref[i], 1e-7) << i;
    if (c[i] > 0) {
      EXPECT_NEAR(a[i], c[i], 1e-7) << i;
    }
    total += a[i];
  }
  EXPECT_NEAR(total, 1.0, 1e-5);
}

TEST(Sampling, TopKKeepsKMostLikely) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  const auto d = filtered_distribution({0, 5, 1, 4, 2}, p);
  EXPECT_EQ(support(d), 2);
  EXPECT_GT(d[1], 0);
  EXPECT_GT(d[3], 0);
  EXPECT_NEAR(d[1] + d[3], 1.0, 1e-6);
  EXPECT_NEAR(d[1] / d[3], std::exp(1.0), 1e-4);
}

TEST(Sampling, TopPKeepsSmallestPrefixReachingP) {
  SamplingParams p;
  p.temperature = 1.0f;
  // probabilities 0.5, 0.3, 0.2
  const std::vector<float> lg = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  p.top_p = 0.5f;
  EXPECT_EQ(support(filtered_distribution(lg, p)), 1);
  p.top_p = 0.75f;
  const auto d = filtered_distribution(lg, p);
  EXPECT_EQ(support(d), 2);
  EXPECT_NEAR(d[0], 0.5 / 0.8, 1e-6);
  p.top_p = 1.0f;
  EXPECT_EQ(support(filtered_distribution(lg, p)), 3);
}

TEST(Sampling, DrawsFollowTheReportedDistribution) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 6;
  p.top_p = 0.95f;
  const std::vector<float> lg = randn(10, 3);
  Rng rng(11);
  const Distribution q = filtered_distribution(lg, p);
  std::vector<int64_t> counts(10, 0);
  for (int i = 0; i < 40000; ++i) {
    Sample s = sample(lg, p, rng);
    ASSERT_EQ(s.q, q);
    counts[s.token]++;
  }
  EXPECT_GT(goodness_of_fit_pvalue(counts, std::vector<double>(q.begin(), q.end())), 1e-4);
}

// Most indices of a long tail lose the race without their logarithm being
// taken; the draws must still follow the distribution, tail included.
TEST(Sampling, CategoricalFollowsALongTailedDistribution) {
  Distribution d(300, 0.3f / 296);
  d[7] = 0.4f;
  d[150] = 0.2f;
  d[299] = 0.1f;
  d[0] = 0.0f;  // outside the support: never drawn
  Rng rng(21);
  std::vector<int64_t> counts(d.size(), 0);
  for (int i = 0; i < 60000; ++i) counts[rng.categorical(d)]++;
  EXPECT_EQ(counts[0], 0);
  const double total = std::accumulate(d.begin(), d.end(), 0.0);
  std::vector<double> probs;
  for (float x : d) probs.push_back(x / total);
  EXPECT_GT(goodness_of_fit_pvalue(counts, probs), 1e-4);
}

// Early verdicts verify with a copy of the verifier's Rng: from close
// distributions the copies must mostly draw the same index. Here 5% of the
// mass moves from the first ten indices to the last ten: inverse-CDF sampling
// in index order would shift the intervals of the middle indices by more than
// their width and rarely agree (2% of draws when this test was written); the
// race agrees with probability at least (1 - 0.05) / (1 + 0.05).
TEST(Sampling, CopiesOfOneRngDrawTheSameIndexFromCloseDistributions) {
  Distribution p(100, 0.01f), near = p;
  for (size_t i = 0; i < 10; ++i) {
    near[i] -= 0.005f;
    near[99 - i] += 0.005f;
  }
  Rng rng(4);
  int same = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    Rng copy = rng;
    same += rng.categorical(p) == copy.categorical(near);
  }
  EXPECT_GT(same, static_cast<int>(0.88 * n)) << same << " of " << n;
}

TEST(Sampling, SeedReproduces) {
  SamplingParams p;
  p.temperature = 1.0f;
  const std::vector<float> lg(100, 0.0f);
  Rng a(5), b(5), c(6);
  std::vector<int32_t> x, y, z;
  for (int i = 0; i < 20; ++i) {
    x.push_back(sample(lg, p, a).token);
    y.push_back(sample(lg, p, b).token);
    z.push_back(sample(lg, p, c).token);
  }
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
}

TEST(SamplingBadInput, ParamsOutOfRange) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.top_k = -3;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.top_p = 1.5f;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.temperature = std::numeric_limits<float>::infinity();
  EXPECT_THROW(p.validate(), Error);
}

}  // namespace splitspec::test

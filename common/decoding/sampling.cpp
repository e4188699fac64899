#include "common/decoding/sampling.h"


#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/util/error.h"

namespace splitspec {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    throw Error("temperature must be a finite number >= 0, got " + std::to_string(temperature));
  if (top_k < 0) throw Error("top-k must be >= 0, got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) throw Error("top-p must be in (0, 1], got " + std::to_string(top_p));
}

namespace {

// splitmix64's finaliser: consecutive inputs give independent-looking outputs.
uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

namespace {

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

Rng Rng::keyed(uint64_t seed, int64_t position) {
  // The seed is mixed before the position joins it: a linear key (seed plus a
  // multiple of the position) let the drafter's seed (seed ^ that multiplier's
  // constant) at one position alias the verifier's at the next.
  return Rng(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(position)));
}

int32_t Rng::categorical(const Distribution& dist) {
  // An exponential race: every index i draws E_i ~ Exp(1), and the smallest
  // E_i / dist[i] wins, which happens with probability dist[i]. E_i comes from
  // one draw of the engine hashed with i, so two Rngs in the same state race
  // two distributions with the same E_i, and the closer the distributions,
  // the likelier they pick the same index (at least (1 - TV) / (1 + TV)).
  // Early-exit verdicts rely on that: they verify with a copy of the
  // verifier's Rng, and a pre-draft hits only when their draws agree.
  // Inverse-CDF sampling in index order agrees far less: a little mass moved
  // between low indices shifts every interval after them.
  const uint64_t race = engine_();
  int32_t winner = -1;
  double best = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < dist.size(); ++i) {
    const double p = dist[i];
    if (p <= 0.0) continue;
    // A uniform in (0, 1): 53 bits, never 0.
    const double u = (static_cast<double>(mix(race + 0x9e3779b97f4a7c15ull * (i + 1)) >> 11) + 0.5) * 0x1.0p-53;
    // -log(u) >= 1 - u: most indices lose without computing the logarithm.
    if ((1.0 - u) >= best * p) continue;
    const double t = -std::log(u) / p;
    if (t < best) {
      best = t;
      winner = static_cast<int32_t>(i);
    }
  }
  if (winner < 0) throw Error("sampling from an empty distribution");
  return winner;
}

int32_t greedy_token(const float* p, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (p[i] > p[best]) best = i;
  return static_cast<int32_t>(best);
}

Distribution filtered_distribution(const float* lg, int64_t n, const SamplingParams& params) {
  Distribution out(n, 0.0f);
  if (params.greedy()) {
    out[greedy_token(lg, n)] = 1.0f;
    return out;
  }
  const double inv_t = 1.0 / params.temperature;
  if (params.top_p >= 1.0f && (params.top_k <= 0 || params.top_k >= n)) {
    // Every token stays a candidate: a softmax, with no sort of the
    // vocabulary at every position a round verifies.
    const double max_logit = *std::max_element(lg, lg + n);
    std::vector<double> w(static_cast<size_t>(n));
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      w[i] = std::exp((lg[i] - max_logit) * inv_t);
      total += w[i];
    }
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(w[i] / total);
    return out;
  }
  // Candidate set as indices, so ties resolve by index and stay deterministic.
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); };
  int64_t keep = n;
  if (params.top_k > 0 && params.top_k < n) {
    std::nth_element(idx.begin(), idx.begin() + params.top_k, idx.end(), by_logit);
    keep = params.top_k;
  }
  std::sort(idx.begin(), idx.begin() + keep, by_logit);
  const double max_logit = lg[idx[0]];
  std::vector<double> w(keep);
  double total = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    w[i] = std::exp((lg[idx[i]] - max_logit) * inv_t);
    total += w[i];
  }
  if (params.top_p < 1.0f) {
    // Smallest prefix of the sorted candidates whose mass reaches top_p.
    double acc = 0.0;
    int64_t cut = keep;
    for (int64_t i = 0; i < keep; ++i) {
      acc += w[i] / total;
      if (acc >= params.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = std::accumulate(w.begin(), w.begin() + keep, 0.0);
  }
  for (int64_t i = 0; i < keep; ++i) out[idx[i]] = static_cast<float>(w[i] / total);
  return out;
}

Sample sample(const float* logits, int64_t n, const SamplingParams& params, Rng& rng) {
  Sample s;
  s.q = filtered_distribution(logits, n, params);
  s.token = params.greedy() ? greedy_token(logits, n) : rng.categorical(s.q);
  return s;
}

int32_t next_token(const float* logits, int64_t n, const SamplingParams& params, Rng& rng) {
  return params.greedy() ? greedy_token(logits, n) : rng.categorical(filtered_distribution(logits, n, params));
}

}  // namespace splitspec

#pragma once
// Sampling that reports the exact distribution it drew from. Speculative
// verification is exact only against the post-filter q the draft really used,
// so the filtered distribution is a first-class result here.
#include <cstdint>
#include <random>
#include <vector>

namespace splitspec {

using Distribution = std::vector<float>;  // dense, sums to 1

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f; }
  // Throws splitspec::Error on out-of-range values.
  void validate() const;
};

// Seeded source of uniforms. Each round draws from a stream keyed by the seed
// and the committed length (keyed()), not from one stream that runs on with
// the process: a generation resumed on another server, or continued on
// another verifier, then draws exactly what an uninterrupted one would.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // The stream for the round that starts once `position` tokens are committed.
  static Rng keyed(uint64_t seed, int64_t position);
  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(engine_); }
  // Draws an index from `dist` (which must sum to ~1), with one draw of the
  // engine. Copies of one Rng drawing from close distributions mostly pick
  // the same index (an exponential race; see sampling.cpp).
  int32_t categorical(const Distribution& dist);

 private:
  std::mt19937_64 engine_;
};

// First index of the maximum, the tie rule every greedy path in the project uses.
int32_t greedy_token(const float* logits, int64_t n);

// Temperature, then top-k, then top-p (nucleus), renormalised: the
// distribution a sampler with these params draws from. Greedy gives one-hot.
Distribution filtered_distribution(const float* logits, int64_t n, const SamplingParams& params);

struct Sample {
  int32_t token;
  Distribution q;  // what `token` was drawn from
};

Sample sample(const float* logits, int64_t n, const SamplingParams& params, Rng& rng);
// The same draw without reporting q: greedy decoding then builds no
// vocabulary-sized distribution per step.
int32_t next_token(const float* logits, int64_t n, const SamplingParams& params, Rng& rng);

}  // namespace splitspec

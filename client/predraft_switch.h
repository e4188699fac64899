#pragma once
// Whether to pre-draft the next round. Pre-drafting costs the server its
// early exits and this device the pre-drafts, and it can slow the server's
// forward where both share hardware; it pays only when the cache hits often
// and drafting is slow next to verification (the paper's Eq. 9). So measure
// it: the latency per token of rounds with and without it (from one draft
// sent to the next), taking the better and trying the other every
// `explore_every` rounds, so a change of regime is noticed. One switch
// serves all generations of a client.
#include <cstdint>

namespace splitspec {

class PredraftSwitch {
 public:
  explicit PredraftSwitch(int explore_every = 16) : explore_every_(explore_every) {}

  bool use_next() {
    ++round_;
    // Both arms measured a few times first, pre-drafting first.
    if (n_[1] < kWarmup) return true;
    if (n_[0] < kWarmup) return false;
    const bool better = ms_[1] <= ms_[0];
    return round_ % explore_every_ == 0 ? !better : better;
  }

  // A round's latency: `ms` from its draft being sent to the next one being
  // sent, for `tokens` committed by its verdict.
  void observe(bool used, double ms, int64_t tokens) {
    if (tokens <= 0) return;
    const double per_token = ms / static_cast<double>(tokens);
    double& avg = ms_[used ? 1 : 0];
    int64_t& n = n_[used ? 1 : 0];
    avg = n == 0 ? per_token : avg + kAlpha * (per_token - avg);
    n += 1;
  }

  int64_t rounds_with() const { return n_[1]; }
  int64_t rounds_without() const { return n_[0]; }

 private:
  static constexpr int64_t kWarmup = 3;
  static constexpr double kAlpha = 0.1;  // exponential average: recent rounds weigh more
  const int explore_every_;
  int64_t round_ = 0;
  double ms_[2] = {0, 0};
  int64_t n_[2] = {0, 0};
};

}  // namespace splitspec

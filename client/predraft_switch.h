#pragma once
// Whether to pre-draft the next round. Pre-drafting costs the server its
// early exits and this device the pre-drafts, and it can slow the server's
// forward where both share hardware; it pays only when the cache hits often
// and drafting is slow next to verification (the paper's Eq. 9). So measure
// it: the time of rounds with and without it (from one draft sent to the
// next), keeping to the better arm and trying the other now and then, so a
// change of regime is noticed. One switch serves all generations of a client.
//
// - Arms run in blocks of rounds, and a block's first round is no sample: a
//   lone pre-drafting round among plain ones finds the worker and the
//   server's exits cold, and measured here such rounds were no faster than
//   plain ones while pre-drafting every round was 7% faster.
// - Time per round, not per token: pre-drafting never changes what a round
//   commits (only the final verdict decides), so both arms commit the same
//   tokens per round on average, and the count, 1 to gamma+1 from one round
//   to the next, would only add noise many times the few percent to be told
//   apart.
// - The geometric mean of round times, not the arithmetic: measured here, the
//   slowest 1% of rounds take 3x the median and the slowest 15x, stalls of the
//   machine that have nothing to do with the arm, yet they would move an
//   arithmetic average more than pre-drafting does.
#include <cmath>
#include <cstdint>

namespace splitspec {

class PredraftSwitch {
 public:
  struct Choice {
    bool use = false;     // pre-draft this round
    bool sample = false;  // its time counts towards its arm
  };

  // Every `explore_every`-th block of `block` rounds tries the other arm.
  explicit PredraftSwitch(int block = 8, int explore_every = 8) : block_(block), explore_every_(explore_every) {}

  Choice next() {
    if (left_ == 0) {
      ++blocks_;
      // Both arms measured first, pre-drafting first.
      if (blocks_ <= 2) {
        use_ = blocks_ == 1;
      } else {
        const bool better = log_ms_[1] <= log_ms_[0];
        use_ = blocks_ % explore_every_ == 0 ? !better : better;
      }
      left_ = block_;
    }
    const bool first = left_ == block_;
    --left_;
    return {use_, !first};
  }

  // A round's latency: `ms` from its draft being sent to the next one being
  // sent, for `tokens` committed by its verdict (a round that committed
  // nothing is no sample).
  void observe(const Choice& c, double ms, int64_t tokens) {
    if (!c.sample || tokens <= 0 || !(ms > 0)) return;
    const double x = std::log(ms);
    double& avg = log_ms_[c.use ? 1 : 0];
    int64_t& n = n_[c.use ? 1 : 0];
    avg = n == 0 ? x : avg + kAlpha * (x - avg);
    n += 1;
  }

  int64_t rounds_with() const { return n_[1]; }
  int64_t rounds_without() const { return n_[0]; }

 private:
  // Exponential average over about the last 50 samples of an arm: even
  // without the stalls, the middle 80% of round times span -15% to +30% of
  // the median, and pre-drafting saves a few percent.
  static constexpr double kAlpha = 0.02;
  const int block_, explore_every_;
  int64_t blocks_ = 0;
  int left_ = 0;  // rounds left in the current block
  bool use_ = false;
  double log_ms_[2] = {0, 0};
  int64_t n_[2] = {0, 0};
};

}  // namespace splitspec

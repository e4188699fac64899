#pragma once
// The draft's confidence in a token, read as how often such tokens have
// actually been accepted. EdgeLLM's pacer and fallback treat the draft's
// confidence as the chance a token is right; a small draft's softmax over a
// large vocabulary is far from that (ours: its top token, accepted about 0.8
// of the time, often has probability below 0.2, hardly above its runner-up),
// which makes trees bushy and shallow. So a token's confidence is the
// acceptance rate seen so far for tokens of its rank among its siblings and
// its probability's bin, learned from each verification, starting from the
// probability itself (a prior worth a few observations) so that an untrained
// calibration changes nothing.
#include <algorithm>
#include <array>
#include <cstdint>

namespace splitspec {

class ConfidenceCalibration {
 public:
  ConfidenceCalibration() {
    for (int r = 0; r < kRanks; ++r)
      for (int b = 0; b < kBins; ++b) {
        correct_[r][b] = kPrior * kCentre[b];
        seen_[r][b] = kPrior;
      }
  }
  // `rank`: 0 for the draft's most likely token, 1 for the next, ...
  double operator()(int rank, double prob) const {
    const int r = std::min(rank, kRanks - 1), b = bin(prob);
    return correct_[r][b] / seen_[r][b];
  }
  void record(int rank, double prob, bool correct) {
    const int r = std::min(rank, kRanks - 1), b = bin(prob);
    seen_[r][b] += 1;
    if (correct) correct_[r][b] += 1;
  }

 private:
  static constexpr int kRanks = 4, kBins = 6;
  static constexpr double kPrior = 2;
  static constexpr std::array<double, kBins> kUpper = {0.02, 0.05, 0.1, 0.2, 0.5, 1.01};
  static constexpr std::array<double, kBins> kCentre = {0.01, 0.035, 0.075, 0.15, 0.35, 0.75};
  static int bin(double p) {
    int b = 0;
    while (b < kBins - 1 && p >= kUpper[b]) ++b;
    return b;
  }
  std::array<std::array<double, kBins>, kRanks> correct_{}, seen_{};
};

}  // namespace splitspec

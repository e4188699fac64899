#pragma once
// Which of two thread counts a model's forwards run on, chosen by timing
// both. Whether a forward's threads_for() count beats one thread depends
// on more than its size: how fast the machine's cores hand each other a
// cache line (a forward is dozens of parallel regions, each a hand-off),
// and what else runs on them. The demo target's 5-token forward at 2
// threads took 0.37 ms against 0.56 on one on a Sapphire Rapids VM; on a
// Zen 5 VM whose cores pass a line in 500 ns, 0.83 against 0.77. So the
// forwards of each size run mostly on the faster count, timed on both in
// turn. Free of LibTorch.
#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace splitspec::kernels {

class ThreadChoice {
 public:
  using Clock = std::chrono::steady_clock;
  // What pick() chose: the thread count, and what record() needs.
  struct Pick {
    int threads = 1;
    int option = -1;  // 0: the wanted count, 1: one thread; -1: not timed
    int bucket = 0;
  };
  // The threads for a forward of `rows` rows starting `now`, whose work is
  // worth `wanted` (threads_for). One thread and untimed when wanted is 1,
  // or when this thread's count was set explicitly (threads_timed()).
  Pick pick(int64_t rows, int wanted, Clock::time_point now);
  // The forward `p` was for took `seconds`.
  void record(const Pick& p, double seconds);

  // Each option's last kKept times, per size; medians of them decide.
  static constexpr int kKept = 8;
  // Times each option gets, alternating, before either is preferred.
  static constexpr int kFirst = 3;
  // The wanted count is preferred only when its median is this much below
  // one thread's: at a tie the machine's other work gets the core. Beside
  // a 1 kHz control loop, where the demo target's forward takes the same
  // on 1 and 2 threads, a choice that followed the noise woke a sleeping
  // worker every few forwards, and a woken worker placed on the loop's
  // core made it miss 8-19 deadlines a thousand against 1-3.
  static constexpr double kMargin = 0.03;
  // One forward in every(a, b) is a try of the other option, whose median
  // is a fraction `gap` slower: a try costs gap of a forward, so tries
  // every gap / kTryCost forwards cost kTryCost of the time whatever the
  // gap, between kMinEvery and kMaxEvery. Under 1% of the forwards from a
  // gap of 50% on, so that a p99 is the faster option's (the 1B-class
  // forward at 1 thread takes 1.6x its 2-thread time).
  static constexpr double kTryCost = 0.005;
  static constexpr int kMinEvery = 8;
  static constexpr int kMaxEvery = 256;
  static int every(double a, double b);
  // And at most one try in kTryGap, for the same loop's sake: a try on two
  // threads wakes the worker, which can only run on the loop's core. With
  // a try in every 100 ms the loop still missed 3.3-9.4 deadlines a
  // thousand against 1.0-3.0 beside one thread.
  static constexpr auto kTryGap = std::chrono::seconds(1);

 private:
  struct Times {
    std::array<double, kKept> t{};
    int count = 0;  // at most kKept
    int next = 0;
    double median() const;
  };
  struct Size {
    std::array<Times, 2> options;
    int since_other = 0;
    Clock::time_point last_try{};
  };
  std::mutex mutex_;
  // By rows: 1, 2-3, 4-7, ...
  std::array<Size, 24> sizes_;
};

}  // namespace splitspec::kernels

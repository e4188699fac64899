// How a model's forwards choose their threads (common/kernels/thread_choice.h),
// on made-up timings.
#include "common/kernels/thread_choice.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "common/kernels/parallel.h"

namespace splitspec::kernels {
namespace {

// Runs f on a fresh thread whose count is `n`, default (timed) or not: the
// counts are per thread.
void on_thread(int n, bool timed, const std::function<void()>& f) {
  std::thread t([&] {
    set_threads(n, timed);
    f();
  });
  t.join();
}

// A ThreadChoice on a clock that the forwards move.
struct Forwards {
  ThreadChoice choice;
  ThreadChoice::Clock::time_point now{};
  // `count` forwards of `rows` rows taking ms_many on the wanted count (2)
  // and ms_one on one thread; how many ran on the wanted count.
  int run(int64_t rows, int count, double ms_many, double ms_one) {
    int many = 0;
    for (int i = 0; i < count; ++i) {
      const ThreadChoice::Pick p = choice.pick(rows, 2, now);
      many += p.threads == 2;
      const double ms = p.threads == 2 ? ms_many : ms_one;
      choice.record(p, ms / 1e3);
      now += std::chrono::microseconds(static_cast<int64_t>(ms * 1e3));
    }
    return many;
  }
};

TEST(ThreadChoice, AnExplicitCountIsUsedAsGiven) {
  on_thread(2, false, [] {
    Forwards f;
    EXPECT_EQ(f.run(5, 100, 2000, 1000), 100);
  });
}

TEST(ThreadChoice, WorkForOneThreadIsNotTimed) {
  on_thread(2, true, [] {
    ThreadChoice choice;
    const ThreadChoice::Pick p = choice.pick(1, 1, {});
    EXPECT_EQ(p.threads, 1);
    EXPECT_EQ(p.option, -1);
  });
}

// Forwards of 0.7-2 s, long enough that every() sets the tries, not kTryGap.
TEST(ThreadChoice, TakesTheFasterMostly) {
  on_thread(2, true, [] {
    Forwards one_faster, many_faster;
    // Three of each first, then one try of the slower in every().
    const int n = 3 * ThreadChoice::every(1000, 700) + 6;
    EXPECT_EQ(one_faster.run(5, n, 1000, 700), 3 + 3);
    EXPECT_EQ(many_faster.run(5, n, 700, 1000), n - 3 - 3);
  });
}

TEST(ThreadChoice, TriesCostLittleWhateverTheGap) {
  EXPECT_EQ(ThreadChoice::every(1.0, 1.02), ThreadChoice::kMinEvery);
  EXPECT_EQ(ThreadChoice::every(1.2, 1.0), ThreadChoice::every(1.0, 1.2));
  EXPECT_LT(ThreadChoice::every(1.1, 1.0), ThreadChoice::every(1.3, 1.0));
  for (double gap : {0.1, 0.3, 0.6, 1.0}) {
    const int every = ThreadChoice::every(1.0, 1.0 + gap);
    EXPECT_LE(gap / every, 1.2 * ThreadChoice::kTryCost) << gap;
  }
  // A p99 stays the faster count's from a 50% gap on.
  EXPECT_GE(ThreadChoice::every(1.0, 1.5), 100);
  EXPECT_EQ(ThreadChoice::every(1.0, 10.0), ThreadChoice::kMaxEvery);
}

// At a tie, or nearly, one thread: the other core is the machine's.
TEST(ThreadChoice, ATieGoesToOneThread) {
  on_thread(2, true, [] {
    Forwards tie, near;
    const int n = 3 * ThreadChoice::kMinEvery + 6;
    EXPECT_EQ(tie.run(5, n, 2000, 2000), 3 + 3);
    EXPECT_EQ(near.run(5, n, 1960, 2000), 3 + 3);
  });
}

// Short forwards are tried at most once in kTryGap, however close.
TEST(ThreadChoice, TriesAreSpacedInTime) {
  on_thread(2, true, [] {
    Forwards f;
    f.run(5, 6, 0.5, 0.5);
    const int per_gap = static_cast<int>(std::chrono::duration<double, std::milli>(ThreadChoice::kTryGap).count() / 0.5);
    EXPECT_LE(f.run(5, 10 * per_gap, 0.5, 0.5), 10);
    EXPECT_GE(f.run(5, 10 * per_gap, 0.5, 0.5), 9);
  });
}

TEST(ThreadChoice, FollowsAChange) {
  on_thread(2, true, [] {
    Forwards f;
    f.run(5, 200, 2000, 1000);
    // The process beside ends: two threads are faster now. Their tries
    // replace the old times in turn; past half of them they are preferred.
    const int tries = ThreadChoice::kKept / 2 + 1;
    f.run(5, (tries + 1) * ThreadChoice::every(2000, 1000), 500, 1000);
    const int n = 2 * ThreadChoice::every(500, 1000);
    EXPECT_EQ(f.run(5, n, 500, 1000), n - 2);
    // The preferred count's own times show a slowdown at once: half its
    // times slow, then a try or two.
    const int slow = f.run(5, n, 2000, 1000);
    EXPECT_GE(slow, ThreadChoice::kKept / 2);
    EXPECT_LE(slow, ThreadChoice::kKept / 2 + 2);
  });
}

TEST(ThreadChoice, EachSizeHasItsOwn) {
  on_thread(2, true, [] {
    Forwards f;
    f.run(1, 100, 1000, 500);   // a step: one thread faster
    f.run(64, 100, 1000, 2000);  // a verification: two
    EXPECT_LE(f.run(1, 256, 1000, 500), 2);
    EXPECT_GE(f.run(64, 256, 1000, 2000), 254);
  });
}

}  // namespace
}  // namespace splitspec::kernels

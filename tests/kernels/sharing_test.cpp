// When the pool's caller works alone (common/kernels/sharing.h), on measures
// made up after what a 2-vCPU VM showed.
#include "common/kernels/sharing.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>

namespace splitspec::kernels {
namespace {

using namespace std::chrono_literals;
using Clock = Sharing::Clock;

constexpr int kCpus = 2;

// Back-to-back 2-thread jobs of 1 ms on a clock they move, each ending with
// a sample where one is due: `others(i)` other threads runnable at the i-th
// sample, and, with `workers_awake`, the caller's worker counted as its own
// (it spins between jobs); `delay_percent(ms)` of the time since the last
// read waited for a core.
struct Jobs {
  Sharing sharing;
  Clock::time_point now{};
  int64_t delay_ns = 0;
  Clock::time_point last_read{};
  int samples = 0;

  // Runs jobs for `span`; returns the milliseconds the caller spent alone.
  int64_t run(Clock::duration span, bool workers_awake, const std::function<int(int)>& others,
                      const std::function<double(Clock::time_point)>& delay_percent) {
    Clock::duration alone{};
    for (const auto until = now + span; now < until;) {
      const auto start = now;
      now += 1ms;
      if (sharing.alone(start)) alone += 1ms;
      if (sharing.job(start, now, now, false)) {
        delay_ns += static_cast<int64_t>(delay_percent(now) / 100 * std::chrono::nanoseconds(now - last_read).count());
        last_read = now;
        sharing.delay(now, delay_ns);
      }
      if (sharing.sample_due(now)) {
        const int ours = workers_awake ? 2 : 1;
        sharing.sample(now, ours + others(samples++), ours, 2, kCpus);
      }
    }
    return std::chrono::duration_cast<std::chrono::milliseconds>(alone).count();
  }
};

int none(int) { return 0; }
double no_delay(Clock::time_point) { return 0.0; }

TEST(Sharing, IdleCoresKeepTheWorkers) {
  Jobs jobs;
  EXPECT_EQ(jobs.run(10s, true, none, no_delay), 0);
}

// The VM's idle windows waited 0.2-4.9%, one in ten more (up to 9.4%): one
// such window alone does not send the caller alone; two in a row do, and
// one as high as the loop's 22% at once.
TEST(Sharing, OneDelayedWindowIsNoiseTwoInARowArePeriodicWork) {
  Jobs jobs;
  int window = 0;
  auto every_tenth = [&](Clock::time_point) { return ++window % 10 == 0 ? 9.4 : 2.0; };
  EXPECT_EQ(jobs.run(10s, true, none, every_tenth), 0);
  // The window under way when the waits begin may stay under 5%; the next
  // two (200 ms each) do not.
  EXPECT_GE(jobs.run(1s, true, none, [](Clock::time_point) { return 9.0; }), 390);
  EXPECT_TRUE(jobs.sharing.alone(jobs.now));
  Jobs loop;
  EXPECT_GE(loop.run(1s, true, none, [](Clock::time_point) { return 22.0; }), 700) << "alone from the first window";
}

// A pause between jobs begins a new window: a delayed window before it and
// one after are not two in a row.
TEST(Sharing, APauseBetweenJobsBeginsTheWindowsAgain) {
  Jobs jobs;
  jobs.run(300ms, true, none, [](Clock::time_point) { return 9.0; });
  EXPECT_FALSE(jobs.sharing.alone(jobs.now));
  jobs.now += 1s;
  jobs.last_read = jobs.now;
  jobs.run(300ms, true, none, [](Clock::time_point) { return 9.0; });
  EXPECT_FALSE(jobs.sharing.alone(jobs.now));
}

// An agent that wakes every 50 ms waits for a core while both are the
// caller's, and is counted in three samples of each 25 (the VM's: up to 20
// of 128): not periodic work. Counted with a core free, where it runs at once, it
// is seen in none; a loop running a fifth of the time is seen in a fifth
// of those samples, and keeps the caller alone for as long as it runs.
TEST(Sharing, OnlySamplesWithACoreFreeCountPeriodicWork) {
  Jobs jobs;
  auto agent = [](int i) { return i % 25 < 3 ? 1 : 0; };
  EXPECT_EQ(jobs.run(5s, true, agent, no_delay), 0);
  auto loop = [](int i) { return i % 5 == 0 ? 1 : 0; };
  jobs.run(1s, false, loop, no_delay);
  EXPECT_TRUE(jobs.sharing.alone(jobs.now));
  EXPECT_EQ(jobs.run(5s, false, loop, no_delay), 5000) << "the loop ran on";
  jobs.run(3s, false, none, no_delay);
  EXPECT_FALSE(jobs.sharing.alone(jobs.now)) << "3 s after the loop ended";
}

// A busy process is runnable in every sample: alone within 16 samples, for
// as long as it runs, and back to the workers within two seconds after
// (its samples while alone count as periodic work too).
TEST(Sharing, ABusyProcessSendsTheCallerAloneWhileItRuns) {
  Jobs jobs;
  auto busy = [](int) { return 1; };
  jobs.run(40ms, true, busy, no_delay);
  EXPECT_TRUE(jobs.sharing.alone(jobs.now));
  EXPECT_EQ(jobs.run(3s, false, busy, no_delay), 3000);
  jobs.run(2300ms, false, none, no_delay);
  EXPECT_FALSE(jobs.sharing.alone(jobs.now));
}

// A caller that waits 3 ms for a begun chunk, longer than twice its own
// share, four times within half a second, was waiting on preempted workers.
TEST(Sharing, FourPreemptionsSendTheCallerAloneForHalfASecond) {
  Sharing sharing;
  Clock::time_point now{};
  for (int i = 0; i < 3; ++i) {
    sharing.job(now, now + 1ms, now + 4ms, true);
    now += 50ms;
  }
  EXPECT_FALSE(sharing.alone(now));
  sharing.job(now, now + 1ms, now + 4ms, true);
  EXPECT_TRUE(sharing.alone(now + 4ms));
  EXPECT_TRUE(sharing.alone(now + 400ms));
  EXPECT_FALSE(sharing.alone(now + 600ms));
}

}  // namespace
}  // namespace splitspec::kernels

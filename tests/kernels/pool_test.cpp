// The compute threads behind parallel() (common/kernels/pool.cpp), and the
// scheduler's measure they use (common/kernels/sched_stats.h).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/kernels/parallel.h"
#include "common/kernels/sched_stats.h"

namespace splitspec::kernels {
namespace {

// 70 threads: more than a job has ranges (64), so some own none and only
// take others' chunks.
TEST(Pool, EveryChunkRunsOnceWhateverTheThreads) {
  for (int n : {1, 2, 3, 4, 70}) {
    ScopedThreads threads(n);
    for (int64_t count : {1, 2, 7, 100, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(count));
      parallel(count, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) runs[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(runs[static_cast<size_t>(i)].load(), 1) << n << " threads, " << count;
    }
  }
}

// Jobs back to back, each of another size, each chunk once and all done
// before parallel() returns. A worker still in one job's last claim when
// the next was being posted once saw the new job's chunk count beside the
// old job's exhausted claim and took a chunk that was not there: run twice,
// counted done once too often, so that a caller returned while a chunk still
// wrote into its frame (a segfault beside a 1 kHz control loop).
// Each round on a new thread, whose pool has no history: one that waited
// much soon works alone, and alone it cannot show this.
TEST(Pool, BackToBackJobsOfOtherSizesRunEachChunkOnce) {
  for (int round = 0; round < 40; ++round) {
    std::thread([round] {
      ScopedThreads threads(3);
      for (int job = 0; job < 20000; ++job) {
        const int64_t count = 1 + job % 4;
        std::atomic<int> runs[4] = {0, 0, 0, 0};
        parallel(count, 1, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) runs[i].fetch_add(1);
        });
        for (int64_t i = 0; i < 4; ++i)
          ASSERT_EQ(runs[i].load(), i < count ? 1 : 0) << "round " << round << ", job " << job << ", chunk " << i;
      }
    }).join();
  }
}

TEST(Pool, CallersOnSeveralThreadsEachGetEveryChunk) {
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      ScopedThreads threads(3);
      for (int job = 0; job < 300; ++job) {
        std::vector<std::atomic<int>> runs(64);
        parallel(64, 4, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) runs[static_cast<size_t>(i)].fetch_add(1);
        });
        for (auto& r : runs) wrong += r.load() != 1;
      }
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Pool, ANestedRangeRunsOnTheThreadThatAskedForIt) {
  ScopedThreads threads(2);
  std::atomic<int> elsewhere{0};
  parallel(8, 1, [&](int64_t, int64_t) {
    const auto me = std::this_thread::get_id();
    parallel(16, 1, [&](int64_t b, int64_t e) {
      elsewhere += std::this_thread::get_id() != me || b != 0 || e != 16;
    });
  });
  EXPECT_EQ(elsewhere.load(), 0);
}

// Workers held in their chunks far longer than the caller's own share (as
// preempted ones are), four times in a row, make the caller run the next
// jobs by itself. On a new
// thread, whose pool has no history.
TEST(Pool, AfterWaitingOnAHeldWorkerTheCallerWorksAlone) {
  std::set<std::thread::id> ran;
  std::thread::id caller;
  std::thread([&] {
    ScopedThreads threads(2);
    caller = std::this_thread::get_id();
    for (int held = 0; held < 4; ++held) {
      std::atomic<bool> begun{false};
      parallel(2, 1, [&](int64_t, int64_t) {
        if (std::this_thread::get_id() == caller) {
          // Bounded: a caller already working alone runs both chunks, and
          // the expectation below then fails instead of the test hanging.
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (!begun.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
        } else {
          begun = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      });
    }
    std::mutex m;
    parallel(64, 1, [&](int64_t, int64_t) {
      std::lock_guard<std::mutex> lock(m);
      ran.insert(std::this_thread::get_id());
    });
  }).join();
  EXPECT_EQ(ran, std::set<std::thread::id>{caller});
}

// Pins the calling thread (and the threads it creates after) to one CPU it
// may run on.
void pin_to_one_cpu() {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &set)) ++cpu;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof set, &set), 0);
}

void spin_for(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Two busy threads on one core each wait for it about half the time; the
// measure says so, and only of the thread that reads it.
TEST(RunDelay, GrowsWhileTheThreadWaitsForItsCore) {
  int64_t waited[2] = {0, 0};
  std::atomic<bool> available{true};  // both busy threads may clear it
  std::thread([&] {
    pin_to_one_cpu();
    std::vector<std::thread> busy;
    for (int i = 0; i < 2; ++i)
      busy.emplace_back([&, i] {
        RunDelay d;
        if (!d.available()) available = false;
        const int64_t before = d.ns();
        spin_for(std::chrono::milliseconds(300));
        waited[i] = d.ns() - before;
      });
    for (auto& t : busy) t.join();
  }).join();
  if (!available) GTEST_SKIP() << "this kernel gives no /proc/thread-self/schedstat";
  // 300 ms each on one core: together they waited about 300 ms.
  EXPECT_GT(waited[0] + waited[1], 100'000'000) << waited[0] << " + " << waited[1] << " ns";
}

// Three threads kept busy are runnable, with the one that counts.
TEST(Runnable, CountsBusyThreads) {
  Runnable r;
  if (r.now() < 0) GTEST_SKIP() << "this kernel gives no /proc/loadavg";
  EXPECT_GE(r.cpus(), 1);
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i < 3; ++i)
    busy.emplace_back([&] {
      while (!stop.load()) {
      }
    });
  int most = 0;
  for (int i = 0; i < 20; ++i) {
    most = std::max(most, r.now());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop = true;
  for (auto& t : busy) t.join();
  EXPECT_GE(most, 4);
}

// A caller and its worker on one core keep each other waiting for it; the
// caller then works alone, as it does beside another busy process. Seen
// through a job whose chunks sleep: alone, the caller runs them all; with
// its worker, the worker takes those the caller leaves while it sleeps.
TEST(Pool, ThreadsThatShareOneCoreWorkAlone) {
  if (!RunDelay().available()) GTEST_SKIP() << "this kernel gives no /proc/thread-self/schedstat";
  std::set<std::thread::id> ran;
  std::thread::id caller;
  std::thread([&] {
    pin_to_one_cpu();
    ScopedThreads threads(2);
    caller = std::this_thread::get_id();
    for (int attempt = 0; attempt < 5 && ran != std::set<std::thread::id>{caller}; ++attempt) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      while (std::chrono::steady_clock::now() < until)
        parallel(8, 1, [](int64_t, int64_t) { spin_for(std::chrono::microseconds(200)); });
      ran.clear();
      std::mutex m;
      parallel(8, 1, [&](int64_t, int64_t) {
        {
          std::lock_guard<std::mutex> lock(m);
          ran.insert(std::this_thread::get_id());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      });
    }
  }).join();
  EXPECT_EQ(ran, std::set<std::thread::id>{caller});
}

// A thread runnable a quarter of the time (a control loop's ticks) shares
// the cores. A caller that only asks, as a forward it runs on one thread
// does, finds so within a second, and keeps finding so past kSharedAlone
// (2 s) with no job of its workers between: it does not go back to them
// while the loop runs.
TEST(Pool, PeriodicWorkSharesTheCoresForAsLongAsItRuns) {
  const Runnable runnable;
  if (runnable.now() < 0) GTEST_SKIP() << "this kernel gives no /proc/loadavg";
  std::atomic<bool> stop{false};
  std::thread loop([&] {
    while (!stop.load()) {
      spin_for(std::chrono::microseconds(500));
      std::this_thread::sleep_for(std::chrono::microseconds(1500));
    }
  });
  std::chrono::milliseconds found{-1};
  int calls = 0, unshared = 0;
  std::thread([&] {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    while (Clock::now() - start < std::chrono::seconds(2) && !cores_shared(runnable.cpus()))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!cores_shared(runnable.cpus())) return;
    found = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    const auto until = Clock::now() + std::chrono::seconds(3);
    while (Clock::now() < until) {
      ++calls;
      unshared += !cores_shared(runnable.cpus());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }).join();
  stop = true;
  loop.join();
  ASSERT_GE(found.count(), 0) << "the loop was not seen in 2 s";
  EXPECT_LT(found.count(), 1000);
  EXPECT_EQ(unshared, 0) << "of " << calls << " calls over 3 s";
}

}  // namespace
}  // namespace splitspec::kernels

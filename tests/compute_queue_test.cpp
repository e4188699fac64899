// The server's compute worker: every job on one thread, in the order posted,
// and every job still queued runs before the worker stops.
#include "server/compute_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace splitspec {
namespace {

TEST(ComputeQueue, RunsJobsOneAtATimeInOrderOnOneThread) {
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::atomic<int> running{0}, most{0};
  {
    ComputeQueue q(1);
    for (int i = 0; i < 50; ++i)
      q.post([&, i] {
        most = std::max(most.load(), ++running);
        {
          std::lock_guard<std::mutex> lock(mu);
          order.push_back(i);
          threads.push_back(std::this_thread::get_id());
        }
        --running;
      });
  }  // the destructor runs what is still queued
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
  for (const auto& t : threads) EXPECT_EQ(t, threads[0]);
  EXPECT_NE(threads[0], std::this_thread::get_id());
  EXPECT_EQ(most.load(), 1);
}

TEST(ComputeQueue, JobsPostedFromManyThreadsAllRun) {
  std::atomic<int> ran{0};
  {
    ComputeQueue q(1);
    std::vector<std::thread> posters;
    for (int t = 0; t < 4; ++t)
      posters.emplace_back([&] {
        for (int i = 0; i < 100; ++i) q.post([&] { ran += 1; });
      });
    for (auto& t : posters) t.join();
  }
  EXPECT_EQ(ran.load(), 400);
}

TEST(ComputeQueue, AJobMayPostTheNext) {
  std::atomic<int> steps{0};
  {
    ComputeQueue q(1);
    std::function<void()> step = [&] {
      if (++steps < 10) q.post(step);
    };
    q.post(step);
    while (steps.load() < 10) std::this_thread::yield();
  }
  EXPECT_EQ(steps.load(), 10);
}

}  // namespace
}  // namespace splitspec

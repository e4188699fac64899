#pragma once
// When a pool's caller works alone: the rules the kernel pool (pool.cpp)
// applies to the scheduler's measures (sched_stats.h) to tell cores shared
// with other work from its own. Fed the measures and the times, not reading
// them, so tests replay what a machine showed. Free of LibTorch.
#include <chrono>
#include <cstdint>

namespace splitspec::kernels {

class Sharing {
 public:
  using Clock = std::chrono::steady_clock;

  // A job of the caller's threads began at `start`; the caller ran out of
  // chunks to take at `helped` and the job ended at `end`, `waited` if the
  // caller waited for another thread's chunk. True when the threads' run
  // delay is wanted now: pass it to delay().
  bool job(Clock::time_point start, Clock::time_point helped, Clock::time_point end, bool waited);
  // The caller's and its workers' run delay summed (RunDelay), in ns, read
  // when job() asked.
  void delay(Clock::time_point now, int64_t ns);
  // Whether a sample of the machine's runnable threads is due now; if so,
  // take it and pass it to sample().
  bool sample_due(Clock::time_point now);
  // `runnable` threads on the machine, `ours` of them the caller and its
  // awake workers, for work of n threads on `cpus` CPUs.
  void sample(Clock::time_point now, int runnable, int ours, int n, int cpus);
  // Whether the caller runs its jobs by itself until later.
  bool alone(Clock::time_point now) const { return now < alone_until_; }

 private:
  void alone_for(Clock::time_point now, Clock::duration d);

  // Samples that saw other work, in windows of a fixed count: whether the
  // window just filled had at least `need` of `size`.
  struct Tally {
    int samples = 0, over = 0;
    bool add(bool o, int size, int need);
  };

  Clock::time_point alone_until_{}, preempt_window_{}, delay_window_{}, last_end_{}, next_sample_{};
  int preemptions_ = 0;
  int64_t last_delay_ = 0;
  bool baseline_ = true;     // the next delay() begins a window
  int delayed_windows_ = 0;  // windows in a row that waited too long
  Tally busy_, periodic_;
};

}  // namespace splitspec::kernels

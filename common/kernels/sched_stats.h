#pragma once
// What the scheduler says of the calling thread and of the machine: whether
// other work shares the cores. The kernel pool (pool.cpp) reads both to
// decide when a job's threads would wait on each other's preemptions.
// Linux's /proc; elsewhere each says it does not know.
#include <cstdint>

namespace splitspec::kernels {

// How long the constructing thread has waited for a core: its time runnable
// but not running (schedstat's second field), in ns since it began. Beside
// other busy work on the same cores it grows; on idle cores it barely moves.
class RunDelay {
 public:
  RunDelay();
  ~RunDelay();
  RunDelay(const RunDelay&) = delete;
  RunDelay& operator=(const RunDelay&) = delete;

  int64_t ns() const;  // 0 where !available()
  bool available() const { return fd_ >= 0; }

 private:
  int fd_ = -1;  // kept open: a read then costs one pread
};

// The machine's threads runnable now, the caller included (loadavg's fourth
// field), and its online CPUs.
class Runnable {
 public:
  Runnable();
  ~Runnable();
  Runnable(const Runnable&) = delete;
  Runnable& operator=(const Runnable&) = delete;

  int now() const;  // -1 where the kernel does not say
  int cpus() const { return cpus_; }

 private:
  int fd_ = -1;
  int cpus_ = 1;
};

}  // namespace splitspec::kernels

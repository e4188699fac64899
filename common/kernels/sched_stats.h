#pragma once
// What the scheduler says of the calling thread and of the machine: whether
// other work shares the cores. The kernel pool (pool.cpp) reads both to
// decide when a job's threads would wait on each other's preemptions.
// Linux's /proc; elsewhere each says it does not know.
#include <cstddef>
#include <cstdint>

namespace splitspec::kernels {

// A /proc file kept open: each read regenerates its text with one pread.
class ProcFile {
 public:
  explicit ProcFile(const char* path);
  ~ProcFile();
  ProcFile(const ProcFile&) = delete;
  ProcFile& operator=(const ProcFile&) = delete;

  bool open() const { return fd_ >= 0; }
  // The text from its start, NUL-terminated; false where it cannot be read.
  bool read(char* buf, size_t size) const;

 private:
  int fd_ = -1;
};

// How long the constructing thread has waited for a core: its time runnable
// but not running (schedstat's second field), in ns since it began. Beside
// other busy work on the same cores it grows; on idle cores it barely moves.
class RunDelay {
 public:
  RunDelay();  // /proc/thread-self names the thread that opens it
  int64_t ns() const;  // 0 where !available()
  bool available() const { return file_.open(); }

 private:
  ProcFile file_;
};

// The machine's threads runnable now, the caller included (loadavg's fourth
// field), and its online CPUs.
class Runnable {
 public:
  Runnable();
  int now() const;  // -1 where the kernel does not say
  int cpus() const { return cpus_; }

 private:
  ProcFile file_;
  int cpus_ = 1;
};

}  // namespace splitspec::kernels

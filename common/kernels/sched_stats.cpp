#include "common/kernels/sched_stats.h"

#if defined(__linux__)
#include <fcntl.h>
#include <unistd.h>
#endif

#include <cstdio>

namespace splitspec::kernels {

#if defined(__linux__)
namespace {

int open_proc(const char* path) { return ::open(path, O_RDONLY | O_CLOEXEC); }

// The file's text from its start (seq_file files regenerate on each read).
bool read_text(int fd, char* buf, size_t size) {
  const ssize_t n = fd < 0 ? -1 : ::pread(fd, buf, size - 1, 0);
  if (n <= 0) return false;
  buf[n] = 0;
  return true;
}

}  // namespace

// /proc/thread-self names the thread that opens it.
RunDelay::RunDelay() : fd_(open_proc("/proc/thread-self/schedstat")) {}
RunDelay::~RunDelay() {
  if (fd_ >= 0) ::close(fd_);
}
int64_t RunDelay::ns() const {
  char buf[96];
  unsigned long long run = 0, delay = 0;
  if (!read_text(fd_, buf, sizeof buf) || std::sscanf(buf, "%llu %llu", &run, &delay) != 2) return 0;
  return static_cast<int64_t>(delay);
}

Runnable::Runnable() : fd_(open_proc("/proc/loadavg")) {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  cpus_ = n > 0 ? static_cast<int>(n) : 1;
}
Runnable::~Runnable() {
  if (fd_ >= 0) ::close(fd_);
}
int Runnable::now() const {
  char buf[128];
  double l1, l5, l15;
  int running = 0, total = 0;
  if (!read_text(fd_, buf, sizeof buf) || std::sscanf(buf, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) != 5)
    return -1;
  return running;
}
#else
RunDelay::RunDelay() = default;
RunDelay::~RunDelay() = default;
int64_t RunDelay::ns() const { return 0; }
Runnable::Runnable() = default;
Runnable::~Runnable() = default;
int Runnable::now() const { return -1; }
#endif

}  // namespace splitspec::kernels

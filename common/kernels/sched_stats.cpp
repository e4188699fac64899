#include "common/kernels/sched_stats.h"

#if defined(__linux__)
#include <fcntl.h>
#include <unistd.h>
#endif

#include <cstdio>

namespace splitspec::kernels {

#if defined(__linux__)
ProcFile::ProcFile(const char* path) : fd_(::open(path, O_RDONLY | O_CLOEXEC)) {}
ProcFile::~ProcFile() {
  if (fd_ >= 0) ::close(fd_);
}
bool ProcFile::read(char* buf, size_t size) const {
  const ssize_t n = fd_ < 0 ? -1 : ::pread(fd_, buf, size - 1, 0);
  if (n <= 0) return false;
  buf[n] = 0;
  return true;
}
#else
ProcFile::ProcFile(const char*) {}
ProcFile::~ProcFile() = default;
bool ProcFile::read(char*, size_t) const { return false; }
#endif

RunDelay::RunDelay() : file_("/proc/thread-self/schedstat") {}

int64_t RunDelay::ns() const {
  char buf[96];
  unsigned long long run = 0, delay = 0;
  if (!file_.read(buf, sizeof buf) || std::sscanf(buf, "%llu %llu", &run, &delay) != 2) return 0;
  return static_cast<int64_t>(delay);
}

Runnable::Runnable() : file_("/proc/loadavg") {
#if defined(__linux__)
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  cpus_ = n > 0 ? static_cast<int>(n) : 1;
#endif
}

int Runnable::now() const {
  char buf[128];
  double l1, l5, l15;
  int running = 0, total = 0;
  if (!file_.read(buf, sizeof buf) || std::sscanf(buf, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) != 5)
    return -1;
  return running;
}

}  // namespace splitspec::kernels

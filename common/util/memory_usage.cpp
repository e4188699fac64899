#include "common/util/memory_usage.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace splitspec {

MemoryUsage memory_usage() {
  MemoryUsage m;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string key;
    uint64_t kb = 0;
    s >> key >> kb;
    if (key == "VmRSS:") m.rss_bytes = kb * 1024;
    if (key == "VmHWM:") m.peak_rss_bytes = kb * 1024;
  }
  return m;
}

uint64_t memory_limit_bytes() {
  const uint64_t ram = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // "max" (v2) or a huge number (v1) when no limit is set: RAM bounds it.
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    uint64_t limit = 0;
    if (in >> limit && limit > 0) return std::min(limit, ram);
  }
  return ram;
}

}  // namespace splitspec

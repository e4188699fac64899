#include "common/util/memory_usage.h"

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

}  // namespace splitspec

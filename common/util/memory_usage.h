#pragma once
// This process's memory as the kernel counts it (/proc/self/status), for
// benchmarks that report RSS.
#include <cstdint>

namespace splitspec {

struct MemoryUsage {
  uint64_t rss_bytes = 0;       // VmRSS: resident now
  uint64_t peak_rss_bytes = 0;  // VmHWM: the most ever resident
};
MemoryUsage memory_usage();

}  // namespace splitspec

#pragma once
// This process's memory as the kernel counts it (/proc/self/status), for
// benchmarks that report RSS, and the limit it runs under.
#include <cstdint>

namespace splitspec {

struct MemoryUsage {
  uint64_t rss_bytes = 0;       // VmRSS: resident now
  uint64_t peak_rss_bytes = 0;  // VmHWM: the most ever resident
};
MemoryUsage memory_usage();

// The most memory this process may use: its cgroup's limit (v2's memory.max,
// else v1's limit_in_bytes) where one is set, else the machine's RAM.
uint64_t memory_limit_bytes();

}  // namespace splitspec

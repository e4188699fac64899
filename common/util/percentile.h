#pragma once
// Percentiles of latency samples, as benchmarks and Stats report them.
#include <algorithm>
#include <vector>

namespace splitspec {

// The p-th percentile (0..100) of v by nearest rank; 0 for no samples.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace splitspec

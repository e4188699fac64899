#pragma once
// Percentiles of latency samples, as benchmarks and Stats report them.
#include <algorithm>
#include <cmath>
#include <vector>

namespace splitspec {

// The p-th percentile (0..100) of v by nearest rank (the smallest sample
// with at least p% of the samples at or below it); 0 for no samples.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(v.size()));
  return v[static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size()))) - 1];
}

}  // namespace splitspec

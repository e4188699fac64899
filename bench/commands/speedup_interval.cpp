#include "bench/commands/speedup_interval.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "common/util/error.h"

namespace splitspec::cli {

namespace {

double ratio(const std::vector<PromptCost>& from, const std::vector<PromptCost>& to, const std::vector<size_t>& pick) {
  PromptCost f, t;
  for (size_t i : pick) {
    f.ms += from[i].ms;
    f.tokens += from[i].tokens;
    t.ms += to[i].ms;
    t.tokens += to[i].tokens;
  }
  return (f.ms / f.tokens) / (t.ms / t.tokens);
}

void check(const std::vector<PromptCost>& from, const std::vector<PromptCost>& to) {
  if (from.empty() || from.size() != to.size())
    throw Error("speedup: need the same prompts for both modes (got " + std::to_string(from.size()) + " and " +
                std::to_string(to.size()) + ")");
}

}  // namespace

double speedup(const std::vector<PromptCost>& from, const std::vector<PromptCost>& to) {
  check(from, to);
  std::vector<size_t> all(from.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return ratio(from, to, all);
}

Interval speedup_interval(const std::vector<PromptCost>& from, const std::vector<PromptCost>& to, double level,
                          int resamples, uint64_t seed) {
  check(from, to);
  if (level <= 0 || level >= 1 || resamples < 1) throw Error("speedup: level must be in (0, 1) and resamples positive");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> any(0, from.size() - 1);
  std::vector<size_t> pick(from.size());
  std::vector<double> draws(static_cast<size_t>(resamples));
  for (double& d : draws) {
    for (size_t& p : pick) p = any(rng);
    d = ratio(from, to, pick);
  }
  std::sort(draws.begin(), draws.end());
  const double tail = (1.0 - level) / 2.0;
  const auto at = [&](double q) {
    const auto i = static_cast<size_t>(std::lround(q * static_cast<double>(draws.size() - 1)));
    return draws[std::min(i, draws.size() - 1)];
  };
  return {at(tail), at(1.0 - tail)};
}

}  // namespace splitspec::cli

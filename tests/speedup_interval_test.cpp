#include "bench/commands/speedup_interval.h"

#include <gtest/gtest.h>

#include <random>

#include "common/util/error.h"

namespace splitspec::test {

using cli::PromptCost;

TEST(SpeedupInterval, CollapsesWhenEveryPromptHasTheSameSpeedup) {
  std::vector<PromptCost> from, to;
  for (int i = 1; i <= 10; ++i) {
    from.push_back({2.0 * i, 8});
    to.push_back({1.0 * i, 8});
  }
  EXPECT_DOUBLE_EQ(cli::speedup(from, to), 2.0);
  const cli::Interval ci = cli::speedup_interval(from, to);
  EXPECT_DOUBLE_EQ(ci.lo, 2.0);
  EXPECT_DOUBLE_EQ(ci.hi, 2.0);
}

TEST(SpeedupInterval, BracketsTheMeasuredSpeedupAndIsRepeatable) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> noise(0.8, 1.2);
  std::vector<PromptCost> from, to;
  for (int i = 0; i < 40; ++i) {
    const double base = 100.0 * noise(rng);  // prompts differ, and each pair shares its prompt's cost
    from.push_back({1.1 * base * noise(rng), 128});
    to.push_back({base * noise(rng), 128});
  }
  const double s = cli::speedup(from, to);
  const cli::Interval ci = cli::speedup_interval(from, to);
  EXPECT_LT(ci.lo, s);
  EXPECT_GT(ci.hi, s);
  EXPECT_LT(ci.hi - ci.lo, 0.3);
  const cli::Interval again = cli::speedup_interval(from, to);
  EXPECT_EQ(again.lo, ci.lo);
  EXPECT_EQ(again.hi, ci.hi);
  const cli::Interval narrow = cli::speedup_interval(from, to, 0.5);
  EXPECT_GE(narrow.lo, ci.lo);
  EXPECT_LE(narrow.hi, ci.hi);
}

TEST(SpeedupInterval, RefusesUnpairedOrEmptyInput) {
  EXPECT_THROW(cli::speedup({}, {}), Error);
  EXPECT_THROW(cli::speedup_interval({{1, 1}}, {{1, 1}, {2, 1}}), Error);
  EXPECT_THROW(cli::speedup_interval({{1, 1}}, {{1, 1}}, 1.5), Error);
}

}  // namespace splitspec::test

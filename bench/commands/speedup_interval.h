#pragma once
// How far a speedup measured on a set of prompts can be trusted: a paired
// bootstrap over the prompts. The bench runs every mode on each prompt in
// turn, so resampling prompts keeps each prompt's runs together. The interval
// covers prompt-to-prompt variation only, not a drift of the machine that
// slowed one mode more than another.
#include <cstdint>
#include <vector>

namespace splitspec::cli {

struct PromptCost {
  double ms = 0;      // wall time of the generation
  double tokens = 0;  // tokens it generated
};

struct Interval {
  double lo = 0, hi = 0;
};

// ms per token of `from` over ms per token of `to`, each summed over prompts.
double speedup(const std::vector<PromptCost>& from, const std::vector<PromptCost>& to);

// The central `level` share of that speedup over `resamples` bootstrap draws
// of the prompts (seeded: the same input gives the same interval). Entry i of
// both is the same prompt. Throws splitspec::Error on empty or unequal input.
Interval speedup_interval(const std::vector<PromptCost>& from, const std::vector<PromptCost>& to, double level = 0.95,
                          int resamples = 2000, uint64_t seed = 1);

}  // namespace splitspec::cli

#pragma once
// The speculative-decoding flags, declared once for every command that takes
// them (generate, eval acceptance, the benchmarks): they fill a
// SpeculativeParams, which goes into the client's Request as it is.
#include <CLI/CLI.hpp>

#include "common/drafting/speculative_params.h"

namespace splitspec {

inline void add_speculative_flags(CLI::App* cmd, SpeculativeParams& params) {
  cmd->add_option("--gamma", params.gamma, "chain drafters (model, pld): draft tokens per round")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
}

}  // namespace splitspec

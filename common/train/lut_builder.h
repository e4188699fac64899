#pragma once
// Warm start for DIAA's look-up tables: run the target over a warm-up text
// and record its top K after every position.
#include <cstdint>
#include <string>

#include "common/drafting/lut_tables.h"

namespace splitspec {

struct LutBuildJob {
  std::string target_dir;
  std::string corpus;     // warm-up text (documents separated by blank lines)
  int64_t tokens = 200000;  // of the corpus, from its start
  LutOptions tables;
  std::string out;        // tables file (.safetensors; the JSON goes beside it)
};

struct LutBuildReport {
  int64_t positions = 0;  // top-K lists recorded
  int64_t rows_used = 0;
  size_t bytes = 0;
  double wall_seconds = 0;
};

LutBuildReport build_lut(const LutBuildJob& job);

}  // namespace splitspec

#pragma once
// Benchmark prompts: JSONL, one object per line, as ../shared/prompts/spec_bench.jsonl.
#include <cstdint>
#include <string>
#include <vector>

namespace splitspec::cli {

// turns[0] of each line (the Spec-Bench format), or "prompt"; at most `max`
// (<= 0: all). Throws splitspec::Error naming the line at fault.
std::vector<std::string> read_prompts(const std::string& path, int32_t max);

}  // namespace splitspec::cli

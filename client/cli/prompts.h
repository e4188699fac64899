#pragma once
// Benchmark prompts: JSONL, one object per line, as ../shared/prompts/spec_bench.jsonl.
#include <cstdint>
#include <string>
#include <vector>

namespace splitspec {
class Tokenizer;
}

namespace splitspec::cli {

struct PromptRecord {
  std::string text;
  std::vector<int32_t> ids;  // "prompt_ids": used verbatim instead of text
  std::string category;      // Spec-Bench's "category"; empty when the line has none
};

// turns[0] of each line (the Spec-Bench format), "prompt" or "text", or
// "prompt_ids" (token ids, verbatim); at most `max` (<= 0: all). Throws
// splitspec::Error naming the line at fault.
std::vector<PromptRecord> read_prompt_records(const std::string& path, int32_t max);
// The texts alone; a line of prompt_ids is an error here.
std::vector<std::string> read_prompts(const std::string& path, int32_t max);

// Each text tokenized with BOS first; a prompt longer than `keep` tokens
// keeps BOS and its last keep - 1 tokens, so that it fits the context.
std::vector<std::vector<int32_t>> encode_prompts(const std::vector<std::string>& texts, const Tokenizer& tok,
                                                 int64_t keep);

}  // namespace splitspec::cli

#pragma once
// A text corpus as one token stream for language-model training.
#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"

namespace splitspec {

// Documents are separated by blank lines; line breaks inside a document are
// reflowed to spaces. Each document becomes BOS + its tokens + EOS: a window
// starting at a document matches how prompts are fed at inference, and a
// model learns to end a text with EOS (without it, a model trained here
// learned to follow a finished document with the next one's BOS, and so
// generated <s>).
// Throws splitspec::Error for a missing or empty file. `max_tokens` > 0 stops
// reading once that many tokens are in hand (the result is cut to it).
std::vector<int32_t> tokenize_corpus(const std::string& path, const Tokenizer& tok, int32_t bos_id,
                                     int64_t max_tokens = 0);

// Windows of seq_len + 1 tokens (inputs and shifted targets).
class WindowSampler {
 public:
  WindowSampler(const std::vector<int32_t>& tokens, int64_t seq_len);
  // Random windows for training step `step`: a pure function of (seed, step),
  // so a resumed run sees exactly the batches the uninterrupted run would.
  // Returns int64 [batch, seq_len + 1] as a flat vector.
  std::vector<int64_t> random_batch(uint64_t seed, int64_t step, int64_t batch) const;
  // Consecutive non-overlapping windows, for evaluation.
  int64_t num_windows() const;
  std::vector<int64_t> window(int64_t index) const;

 private:
  const std::vector<int32_t>& tokens_;
  int64_t seq_len_;
};

}  // namespace splitspec

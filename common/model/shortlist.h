#pragma once
// A head that scores only some tokens, the most frequent ones: reading the
// head matrix over the whole vocabulary (151,936 x hidden for Qwen3.5) is
// most of an early exit's or a draft head's cost and memory, and what it
// predicts is rarely outside the k most frequent tokens. Its scores only
// guess (an exit's verdict, a draft), so outputs stay exact; what it costs
// is the guesses on the tokens it leaves out.
#include <cstdint>
#include <vector>

#include "common/model/rows.h"

namespace splitspec {

// The ids occurring in `tokens`, most frequent first (ties: lower id first),
// at most `limit`: the ranking a shortlist takes its first k from.
std::vector<int32_t> tokens_by_frequency(const std::vector<int32_t>& tokens, int64_t vocab_size, int64_t limit);

class Shortlist {
 public:
  // `tokens` scored by `rows` ([tokens, hidden]: their rows of the head
  // matrix), held in half precision: reading them is the head's time.
  Shortlist(std::vector<int32_t> tokens, const Rows& rows);
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // [n, size()]: each normed row's score of each shortlisted token, in order.
  Rows scores(RowsView normed) const;
  // [n, vocab]: the same scores at their tokens, -inf for every other token.
  Rows logits(RowsView normed, int64_t vocab) const;
  // Bytes of the rows held.
  size_t bytes() const { return head_.size() * sizeof(uint16_t); }

 private:
  std::vector<int32_t> tokens_;
  int64_t hidden_ = 0;
  std::vector<uint16_t> head_;  // [tokens, hidden]
};

}  // namespace splitspec

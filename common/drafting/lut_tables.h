#pragma once
// DIAA's look-up tables: the t-LUT maps a context key to up to K candidate
// next tokens in rank order, the p-LUT holds their probabilities (half
// precision). The key is the last n tokens, for n from `order` down to 1:
// lookup takes the longest key that has a row and fills up with shorter ones.
//
// Memory is fixed when the tables are made, whatever they learn:
// - order 1 (the last token) is a dense row per vocabulary entry, like the
//   paper's tables (its Table 4 sizes are vocabulary x K);
// - longer keys share `slots` hashed rows, direct-mapped: a new key evicts
//   the row in its slot (the paper's replacement, at the level of rows).
// Vocabulary 8000, K 8, order 3 and 8192 slots: 384,000 + 524,288 bytes.
#include <cstdint>
#include <string>
#include <vector>

namespace splitspec {

struct LutOptions {
  int32_t k = 8;          // candidates per row
  int32_t order = 3;      // longest key, in tokens
  int32_t slots = 8192;   // hashed rows for keys of 2 tokens or more
  void validate() const;  // throws splitspec::Error
};

struct LutCandidate {
  int32_t token;
  float prob;
};

class LutTables {
 public:
  LutTables(int64_t vocab_size, const LutOptions& options);

  // Up to K unique candidates for the context ending at `end` (the
  // `length` tokens before it are readable), most probable first within the
  // longest key found, then the next shorter key's, and so on.
  void lookup(const int32_t* end, int64_t length, std::vector<LutCandidate>& out) const;
  // The target's top K at the context ending at `end` (add and replace: a
  // token already in a row takes its new probability; a new one takes a
  // free place, or the least probable one's if it is more probable).
  void update(const int32_t* end, int64_t length, const std::vector<int32_t>& ids, const std::vector<float>& probs);
  // A token seen to follow the context, with no probability known: it joins
  // each row that lacks it at the row's lowest probability (0.5 in an empty
  // row), replacing the least probable entry of a full row.
  void observe(const int32_t* end, int64_t length, int32_t token);

  int64_t vocab_size() const { return vocab_; }
  const LutOptions& options() const { return options_; }
  size_t memory_bytes() const;
  // Rows holding at least one candidate (for tests and logs).
  int64_t rows_used() const;

  // Safetensors plus a JSON sidecar (`path` with .json): vocabulary, K,
  // order, slots and the tokenizer's fingerprint. Loading refuses tables
  // for another vocabulary or tokenizer (an empty fingerprint skips that).
  void save(const std::string& path, const std::string& tokenizer_fingerprint) const;
  static LutTables load(const std::string& path, int64_t vocab_size, const std::string& tokenizer_fingerprint);

 private:
  // Rows are numbered across both kinds: the unigram row of token t is t,
  // hashed slot s is vocab + s. Returns the row of the key of `n` tokens
  // ending at `end`, or -1 when it has none.
  int64_t find_row(const int32_t* end, int32_t n) const;
  // The same, claiming the key's slot (evicting its row) when it has none.
  int64_t claim_row(const int32_t* end, int32_t n);
  uint64_t key_of(const int32_t* end, int32_t n) const;
  void merge(int64_t row, int32_t token, float prob);

  int64_t vocab_;
  LutOptions options_;
  std::vector<int32_t> ids_;     // [vocab + slots, K], -1 for a free place
  std::vector<uint16_t> probs_;  // [vocab + slots, K], IEEE half
  std::vector<uint64_t> keys_;   // [slots], 0 for a free slot
};

}  // namespace splitspec

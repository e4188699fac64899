#pragma once
// The recurrent states of a sequence in a hybrid model's delta-rule layers
// (Qwen3.5), beside its KV cache: what a rollback needs. A state sums the
// whole past, so it cannot be cut back as keys and values are; instead the
// state after each recent entry is kept, and truncating or compacting the
// cache picks the kept state at the new end, bit for bit the state those
// entries alone would give. Kept: every state the last forward saved (all
// of a tree's nodes, a chain's last `window` rows) and those within
// `window` entries of the end; older ones are dropped.
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace splitspec {

class RecurrentStates {
 public:
  RecurrentStates() = default;  // a model without delta-rule layers
  // `floats`: one state of every delta-rule layer together.
  RecurrentStates(int64_t floats, int64_t window);

  bool empty() const { return floats_ == 0; }
  int64_t floats() const { return floats_; }
  int64_t window() const { return window_; }
  size_t bytes() const;

  // The state after the first t entries: kept, or saved by the forward
  // under way; null where neither holds it.
  const float* find(int64_t t) const;
  // A forward over entries past `past`: forgets what an earlier one that
  // failed had saved.
  void begin(int64_t past);
  // Where the forward under way saves the state after entry t - 1 (t > past).
  float* save(int64_t t);
  // The forward's entries became the cache's, which now holds `size`.
  void commit(int64_t size);

  // Whether the state after t entries is kept (a rollback to t is exact).
  bool has(int64_t t) const { return kept_.count(t) != 0; }
  // Rollback to n entries; throws splitspec::Error, changing nothing, where
  // the state after n is not kept.
  void truncate(int64_t n);
  // Tree compaction (KVCache::keep): the states of the kept rows follow them.
  void keep(int64_t base, const std::vector<int64_t>& rows);
  // A copy holding only the state after n entries.
  RecurrentStates copy_at(int64_t n) const;

 private:
  std::vector<float> take();
  void give(std::vector<float> v);
  int64_t floats_ = 0, window_ = 0;
  int64_t past_ = 0;  // where the forward under way began
  std::map<int64_t, std::vector<float>> kept_, saved_;
  std::vector<std::vector<float>> pool_;  // buffers to reuse, so a step allocates nothing
};

}  // namespace splitspec

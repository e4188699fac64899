#pragma once
// Per-sequence key/value cache, preallocated to its capacity so decoding never
// reallocates. Layout per layer: [kv_heads, capacity, head_dim], so the live
// prefix of every head is one strided view with no copy.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "common/engine/model_config.h"

namespace splitspec {

class KVCache {
 public:
  KVCache(const ModelConfig& config, int64_t capacity);

  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }
  int64_t num_layers() const { return keys_.size(0); }
  // Whether this cache has `config`'s layers, key-value heads and head size.
  bool fits(const ModelConfig& config) const;
  // Bytes held by the preallocated storage (keys and values).
  size_t bytes() const;

  // Used by the forward pass: stores `k`/`v` ([kv_heads, n, head_dim]) of
  // `layer` at positions [size(), size()+n); they become visible to size()
  // only with commit(n), once every layer has been written.
  void write(int64_t layer, const at::Tensor& k, const at::Tensor& v);
  // write() from rows as the forward has them: k, v [n, kv_heads, head_dim].
  void write_rows(int64_t layer, const float* k, const float* v, int64_t n);
  void commit(int64_t n);
  // Live keys/values of `layer` including `extra` uncommitted entries.
  at::Tensor keys(int64_t layer, int64_t extra = 0) const;
  at::Tensor values(int64_t layer, int64_t extra = 0) const;

  // Rollback: forget everything after the first n entries.
  void truncate(int64_t n);
  // Tree compaction: of the entries appended after `base`, keep `rows`
  // (offsets from base, strictly increasing) so that they end up at base,
  // base+1, ...; everything else after base is dropped.
  void keep(int64_t base, const std::vector<int64_t>& rows);
  // A new cache, with this one's capacity, holding a copy of the first n entries.
  KVCache fork(int64_t n) const;
  // Reuses this cache's storage to hold a copy of src's first n entries, so a
  // worker thread can re-fork every round without allocating.
  void copy_prefix_from(const KVCache& src, int64_t n);

 private:
  int64_t capacity_;
  int64_t size_ = 0;
  at::Tensor keys_;    // [layers, kv_heads, capacity, head_dim]
  at::Tensor values_;  // same
};

}  // namespace splitspec

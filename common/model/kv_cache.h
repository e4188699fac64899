#pragma once
// Per-sequence key/value cache, allocated to a capacity that reserve() grows
// between forwards (never during one). Layout per attention layer:
// [kv_heads, capacity, head_dim] (each layer its own heads and size), so the
// live prefix of every head is one strided view with no copy. A hybrid
// model's delta-rule layers keep no keys and values but recurrent states
// (recurrent_states.h), which truncate(), keep() and fork() move with the
// entries; a layer sharing another's keys and values (Gemma 4) reads that
// layer's.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/model/model_config.h"
#include "common/model/recurrent_states.h"

namespace splitspec {

// The cache's element type. F16 halves the cache's bytes: each key and value
// is rounded to half once, when written, and attention widens it exactly, so
// a row's result still depends only on what it may see (batch-invariant),
// but differs from an F32 cache's in the last bits.
enum class KVType : uint8_t { F32, F16 };
// "f32" or "f16" (any case); throws splitspec::Error naming the choices.
KVType parse_kv_type(const std::string& name);
const char* kv_type_name(KVType type);

// How many entries back a delta-rule model's cache can roll back to beyond
// its last forward's rows (RecurrentStates' window), unless the model says
// otherwise (Model::set_state_window).
constexpr int64_t kDefaultStateWindow = 16;

class KVCache {
 public:
  KVCache(const ModelConfig& config, int64_t capacity, KVType type = KVType::F32,
          int64_t state_window = kDefaultStateWindow);
  // Moves only: a copy of the entries is fork() or copy_prefix_from().
  KVCache(KVCache&&) = default;
  KVCache& operator=(KVCache&&) = default;

  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }
  int64_t num_layers() const { return layers_; }
  KVType type() const { return type_; }
  // Whether this cache has `config`'s layers, key-value heads and head sizes.
  bool fits(const ModelConfig& config) const;
  // Bytes held by the allocated storage (keys and values, recurrent states).
  size_t bytes() const;
  // Bytes one position takes (keys and values of every attention layer).
  static size_t bytes_per_position(const ModelConfig& config, KVType type);
  // The most bytes a cache's recurrent states take (0 without delta-rule
  // layers) when forwards carry at most `rows` rows: the window's states,
  // those a forward saves, the state before it, and the buffers kept for
  // reuse (RecurrentStates).
  static size_t state_bytes(const ModelConfig& config, int64_t window, int64_t rows);
  // Grows the capacity to at least n (at most max_position_embeddings),
  // keeping the live entries; nothing changes if the allocation fails.
  void reserve(int64_t n);

  // Used by the forward pass: stores k, v ([n, kv_heads, head_dim], as the
  // forward has them) of `layer` at positions [size(), size()+n); they
  // become visible to size() only with commit(n), once every layer has been
  // written.
  void write_rows(int64_t layer, const float* k, const float* v, int64_t n);
  void commit(int64_t n);
  // Keys/values of `layer`: [kv_heads][capacity][head_dim], the live
  // entries first in each head (head_stride() elements apart), as `type()`:
  // float for F32, IEEE half bits for F16.
  const void* keys(int64_t layer) const { return keys_.get() + slot_offset(slot(layer)); }
  const void* values(int64_t layer) const { return values_.get() + slot_offset(slot(layer)); }
  int64_t head_stride(int64_t layer) const { return capacity_ * dims_[static_cast<size_t>(slot(layer))]; }
  // One entry's keys (or values) of `layer`: its key-value heads x head size.
  int64_t layer_kv_width(int64_t layer) const {
    const auto s = static_cast<size_t>(slot(layer));
    return heads_[s] * dims_[s];
  }
  // The delta-rule layers' states (empty for a model without them); the
  // forward reads and saves them (RecurrentStates::find, save).
  RecurrentStates& states() { return states_; }
  const RecurrentStates& states() const { return states_; }

  // Entries [from, from + n) of `layer` as float: k and v [n, kv_heads,
  // head_dim], as write_rows took them.
  void read_rows(int64_t layer, int64_t from, int64_t n, float* k, float* v) const;

  // Rollback: forget everything after the first n entries. With delta-rule
  // layers, throws (changing nothing) where the state after n is not kept.
  void truncate(int64_t n);
  // Tree compaction: of the entries appended after `base`, keep `rows`
  // (offsets from base, strictly increasing) so that they end up at base,
  // base+1, ...; everything else after base is dropped. With delta-rule
  // layers the rows must be a path of the tree, the state of its last the
  // state kept.
  void keep(int64_t base, const std::vector<int64_t>& rows);
  // A new cache, with this one's capacity, holding a copy of the first n
  // entries (and, with delta-rule layers, the state after them alone).
  KVCache fork(int64_t n) const;
  // Reuses this cache's storage to hold a copy of src's first n entries, so a
  // worker thread can re-fork every round without allocating. Both caches
  // must have one type.
  void copy_prefix_from(const KVCache& src, int64_t n);

 private:
  KVCache() = default;
  // Uninitialised storage for the shape and capacity set.
  void allocate();
  // An empty cache of this one's shape and type, allocated to `capacity`.
  KVCache empty_like(int64_t capacity) const;
  int64_t elem_bytes() const { return type_ == KVType::F16 ? 2 : 4; }
  // Where slot s's keys (and values) start in their storage.
  int64_t slot_offset(int64_t s) const { return capacity_ * bases_[static_cast<size_t>(s)] * elem_bytes(); }
  // Layer l's place among the layers with keys and values.
  int64_t slot(int64_t layer) const { return slots_[static_cast<size_t>(layer)]; }
  // Copies entries [from, from+n) of every layer and head to `to`.
  void move_entries(const KVCache& src, int64_t from, int64_t to, int64_t n);
  int64_t layers_ = 0;
  // Per layer, its slot (-1: a delta-rule layer; a sharing layer its
  // source's); per slot, its key-value heads, head size, and the elements
  // per position of the slots before it.
  std::vector<int64_t> slots_, heads_, dims_, bases_;
  int64_t position_elems_ = 0;  // keys (or values) of one position, every slot
  RecurrentStates states_;
  int64_t capacity_ = 0;
  int64_t max_capacity_ = 0;  // the model's max_position_embeddings
  int64_t size_ = 0;
  KVType type_ = KVType::F32;
  // Per slot [kv_heads, capacity, head_dim] of type_, uninitialised: pages
  // become resident as the context grows.
  std::unique_ptr<uint8_t[]> keys_;
  std::unique_ptr<uint8_t[]> values_;
};

}  // namespace splitspec

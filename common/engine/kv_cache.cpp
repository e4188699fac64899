#include "common/engine/kv_cache.h"

#include <cstring>

#include "common/util/error.h"

namespace splitspec {

KVCache::KVCache(const ModelConfig& c, int64_t capacity)
    : layers_(c.num_hidden_layers), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim), capacity_(capacity) {
  if (capacity <= 0 || capacity > c.max_position_embeddings)
    throw Error("KV cache capacity " + std::to_string(capacity) + " must be in [1, max_position_embeddings=" +
                std::to_string(c.max_position_embeddings) + "]");
  allocate();
}

void KVCache::allocate() {
  keys_.reset(new float[layers_ * layer_floats()]);
  values_.reset(new float[layers_ * layer_floats()]);
}

bool KVCache::fits(const ModelConfig& c) const {
  return layers_ == c.num_hidden_layers && kv_heads_ == c.num_key_value_heads && head_dim_ == c.head_dim;
}

size_t KVCache::bytes() const { return 2 * static_cast<size_t>(layers_ * layer_floats()) * sizeof(float); }

void KVCache::write_rows(int64_t layer, const float* k, const float* v, int64_t n) {
  if (size_ + n > capacity_)
    throw Error("KV cache full: " + std::to_string(size_) + " + " + std::to_string(n) + " > capacity " +
                std::to_string(capacity_));
  const int64_t heads = kv_heads_, D = head_dim_;
  float* kb = keys_.get() + layer * layer_floats();
  float* vb = values_.get() + layer * layer_floats();
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t dst = (h * capacity_ + size_ + i) * D, src = (i * heads + h) * D;
      std::memcpy(kb + dst, k + src, D * sizeof(float));
      std::memcpy(vb + dst, v + src, D * sizeof(float));
    }
}

void KVCache::commit(int64_t n) { size_ += n; }

void KVCache::truncate(int64_t n) {
  if (n < 0 || n > size_)
    throw Error("KV cache truncate to " + std::to_string(n) + " outside [0, " + std::to_string(size_) + "]");
  size_ = n;
}

void KVCache::move_entries(const KVCache& src, int64_t from, int64_t to, int64_t n) {
  const size_t bytes = static_cast<size_t>(n * head_dim_) * sizeof(float);
  for (int64_t l = 0; l < layers_; ++l)
    for (int64_t h = 0; h < kv_heads_; ++h) {
      const int64_t head = l * layer_floats() + h * capacity_ * head_dim_;
      const int64_t src_head = l * src.layer_floats() + h * src.capacity_ * head_dim_;
      std::memmove(keys_.get() + head + to * head_dim_, src.keys_.get() + src_head + from * head_dim_, bytes);
      std::memmove(values_.get() + head + to * head_dim_, src.values_.get() + src_head + from * head_dim_, bytes);
    }
}

void KVCache::keep(int64_t base, const std::vector<int64_t>& rows) {
  if (base < 0 || base > size_) throw Error("KV cache keep: base " + std::to_string(base) + " out of range");
  const int64_t appended = size_ - base;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= appended || (i > 0 && rows[i] <= rows[i - 1]))
      throw Error("KV cache keep: rows must be strictly increasing offsets in [0, " + std::to_string(appended) + ")");
  }
  // Rows increase and row i lands at i <= rows[i], so copying in order never
  // overwrites a row that is still to be read.
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t src = base + rows[i];
    const int64_t dst = base + static_cast<int64_t>(i);
    if (src != dst) move_entries(*this, src, dst, 1);
  }
  size_ = base + static_cast<int64_t>(rows.size());
}

KVCache KVCache::fork(int64_t n) const {
  KVCache out;
  out.layers_ = layers_;
  out.kv_heads_ = kv_heads_;
  out.head_dim_ = head_dim_;
  out.capacity_ = capacity_;
  out.allocate();
  out.copy_prefix_from(*this, n);
  return out;
}

void KVCache::copy_prefix_from(const KVCache& src, int64_t n) {
  if (n < 0 || n > src.size_) throw Error("KV cache fork: prefix " + std::to_string(n) + " longer than the source");
  if (layers_ != src.layers_ || kv_heads_ != src.kv_heads_ || head_dim_ != src.head_dim_)
    throw Error("KV cache fork: caches belong to different model shapes");
  if (n > capacity_) throw Error("KV cache fork: prefix " + std::to_string(n) + " exceeds capacity");
  move_entries(src, 0, 0, n);
  size_ = n;
}

}  // namespace splitspec

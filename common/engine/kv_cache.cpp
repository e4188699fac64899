#include "common/engine/kv_cache.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cstring>

#include "common/util/error.h"

namespace splitspec {

KVCache::KVCache(const ModelConfig& c, int64_t capacity) : capacity_(capacity) {
  if (capacity <= 0 || capacity > c.max_position_embeddings)
    throw Error("KV cache capacity " + std::to_string(capacity) + " must be in [1, max_position_embeddings=" +
                std::to_string(c.max_position_embeddings) + "]");
  c10::InferenceMode guard;
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  keys_ = at::empty({c.num_hidden_layers, c.num_key_value_heads, capacity, c.head_dim}, opts);
  values_ = at::empty({c.num_hidden_layers, c.num_key_value_heads, capacity, c.head_dim}, opts);
}

bool KVCache::fits(const ModelConfig& c) const {
  return keys_.size(0) == c.num_hidden_layers && keys_.size(1) == c.num_key_value_heads && keys_.size(3) == c.head_dim;
}

size_t KVCache::bytes() const { return 2 * keys_.numel() * keys_.element_size(); }

void KVCache::write(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  const int64_t n = k.size(1);
  if (size_ + n > capacity_)
    throw Error("KV cache full: " + std::to_string(size_) + " + " + std::to_string(n) + " > capacity " +
                std::to_string(capacity_));
  c10::InferenceMode guard;
  keys_.select(0, layer).narrow(1, size_, n).copy_(k);
  values_.select(0, layer).narrow(1, size_, n).copy_(v);
}

void KVCache::write_rows(int64_t layer, const float* k, const float* v, int64_t n) {
  if (size_ + n > capacity_)
    throw Error("KV cache full: " + std::to_string(size_) + " + " + std::to_string(n) + " > capacity " +
                std::to_string(capacity_));
  const int64_t heads = keys_.size(1), D = keys_.size(3);
  float* kb = keys_.data_ptr<float>() + layer * heads * capacity_ * D;
  float* vb = values_.data_ptr<float>() + layer * heads * capacity_ * D;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t dst = (h * capacity_ + size_ + i) * D, src = (i * heads + h) * D;
      std::memcpy(kb + dst, k + src, D * sizeof(float));
      std::memcpy(vb + dst, v + src, D * sizeof(float));
    }
}

void KVCache::commit(int64_t n) { size_ += n; }

at::Tensor KVCache::keys(int64_t layer, int64_t extra) const {
  return keys_.select(0, layer).narrow(1, 0, size_ + extra);
}

at::Tensor KVCache::values(int64_t layer, int64_t extra) const {
  return values_.select(0, layer).narrow(1, 0, size_ + extra);
}

void KVCache::truncate(int64_t n) {
  if (n < 0 || n > size_)
    throw Error("KV cache truncate to " + std::to_string(n) + " outside [0, " + std::to_string(size_) + "]");
  size_ = n;
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
  c10::InferenceMode guard;
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t src = base + rows[i];
    const int64_t dst = base + static_cast<int64_t>(i);
    if (src == dst) continue;
    keys_.narrow(2, dst, 1).copy_(keys_.narrow(2, src, 1));
    values_.narrow(2, dst, 1).copy_(values_.narrow(2, src, 1));
  }
  size_ = base + static_cast<int64_t>(rows.size());
}

KVCache KVCache::fork(int64_t n) const {
  c10::InferenceMode guard;
  KVCache out(*this);  // shares storage only until the two lines below
  out.keys_ = at::empty_like(keys_);
  out.values_ = at::empty_like(values_);
  out.size_ = 0;
  out.copy_prefix_from(*this, n);
  return out;
}

void KVCache::copy_prefix_from(const KVCache& src, int64_t n) {
  if (n < 0 || n > src.size_) throw Error("KV cache fork: prefix " + std::to_string(n) + " longer than the source");
  if (keys_.size(0) != src.keys_.size(0) || keys_.size(1) != src.keys_.size(1) || keys_.size(3) != src.keys_.size(3))
    throw Error("KV cache fork: caches belong to different model shapes");
  if (n > capacity_) throw Error("KV cache fork: prefix " + std::to_string(n) + " exceeds capacity");
  c10::InferenceMode guard;
  keys_.narrow(2, 0, n).copy_(src.keys_.narrow(2, 0, n));
  values_.narrow(2, 0, n).copy_(src.values_.narrow(2, 0, n));
  size_ = n;
}

}  // namespace splitspec

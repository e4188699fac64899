#include "common/model/kv_cache.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "common/kernels/kernels.h"
#include "common/util/error.h"

namespace splitspec {

KVType parse_kv_type(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (n == "f32") return KVType::F32;
  if (n == "f16") return KVType::F16;
  throw Error("unknown KV cache type '" + name + "' (choose f32 or f16)");
}

const char* kv_type_name(KVType type) { return type == KVType::F16 ? "f16" : "f32"; }

namespace {

// The cache's layout for `c`: KVCache's slots_, heads_, dims_ and bases_.
struct Layout {
  std::vector<int64_t> slots, heads, dims, bases;
  int64_t position_elems = 0;
};

Layout layout_of(const ModelConfig& c) {
  Layout out;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_is_recurrent(l)) {
      out.slots.push_back(-1);
    } else if (!c.layer_has_kv(l)) {
      out.slots.push_back(out.slots[static_cast<size_t>(c.kv_source_layer(l))]);
    } else {
      out.slots.push_back(static_cast<int64_t>(out.heads.size()));
      out.heads.push_back(c.layer_kv_heads(l));
      out.dims.push_back(c.layer_head_dim(l));
      out.bases.push_back(out.position_elems);
      out.position_elems += c.layer_kv_heads(l) * c.layer_head_dim(l);
    }
  }
  return out;
}

int64_t recurrent_layers(const ModelConfig& c) {
  int64_t n = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) n += c.layer_is_recurrent(l);
  return n;
}

}  // namespace

KVCache::KVCache(const ModelConfig& c, int64_t capacity, KVType type, int64_t state_window)
    : layers_(c.num_hidden_layers), capacity_(capacity), max_capacity_(c.max_position_embeddings), type_(type) {
  if (capacity <= 0 || capacity > c.max_position_embeddings)
    throw Error("KV cache capacity " + std::to_string(capacity) + " must be in [1, max_position_embeddings=" +
                std::to_string(c.max_position_embeddings) + "]");
  Layout lay = layout_of(c);
  slots_ = std::move(lay.slots);
  heads_ = std::move(lay.heads);
  dims_ = std::move(lay.dims);
  bases_ = std::move(lay.bases);
  position_elems_ = lay.position_elems;
  if (c.has_recurrent_layers()) states_ = RecurrentStates(recurrent_layers(c) * c.ssm_state_floats(), state_window);
  allocate();
}

void KVCache::allocate() {
  const int64_t bytes = std::max<int64_t>(capacity_ * position_elems_ * elem_bytes(), 1);
  keys_.reset(new uint8_t[bytes]);
  values_.reset(new uint8_t[bytes]);
}

bool KVCache::fits(const ModelConfig& c) const {
  const Layout lay = layout_of(c);
  return layers_ == c.num_hidden_layers && slots_ == lay.slots && heads_ == lay.heads && dims_ == lay.dims &&
         states_.floats() == (c.has_recurrent_layers() ? recurrent_layers(c) * c.ssm_state_floats() : 0);
}

size_t KVCache::bytes() const {
  return 2 * static_cast<size_t>(capacity_ * position_elems_ * elem_bytes()) + states_.bytes();
}

size_t KVCache::bytes_per_position(const ModelConfig& c, KVType type) {
  return 2 * static_cast<size_t>(layout_of(c).position_elems) * (type == KVType::F16 ? 2 : 4);
}

size_t KVCache::state_bytes(const ModelConfig& c, int64_t window, int64_t rows) {
  if (!c.has_recurrent_layers()) return 0;
  return static_cast<size_t>(recurrent_layers(c) * c.ssm_state_floats()) * sizeof(float) *
         static_cast<size_t>(2 * window + rows + 1);
}

void KVCache::reserve(int64_t n) {
  if (n <= capacity_) return;
  if (n > max_capacity_)
    throw Error("KV cache capacity " + std::to_string(n) + " exceeds max_position_embeddings=" +
                std::to_string(max_capacity_));
  KVCache bigger = empty_like(n);
  bigger.move_entries(*this, 0, 0, size_);
  bigger.size_ = size_;
  bigger.states_ = std::move(states_);
  *this = std::move(bigger);
}

void KVCache::write_rows(int64_t layer, const float* k, const float* v, int64_t n) {
  if (size_ + n > capacity_)
    throw Error("KV cache full: " + std::to_string(size_) + " + " + std::to_string(n) + " > capacity " +
                std::to_string(capacity_));
  const int64_t s = slot(layer), heads = heads_[static_cast<size_t>(s)], D = dims_[static_cast<size_t>(s)];
  uint8_t* kb = keys_.get() + slot_offset(s);
  uint8_t* vb = values_.get() + slot_offset(s);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t dst = (h * capacity_ + size_ + i) * D * elem_bytes(), src = (i * heads + h) * D;
      if (type_ == KVType::F16) {
        kernels::float_to_half(k + src, D, reinterpret_cast<uint16_t*>(kb + dst));
        kernels::float_to_half(v + src, D, reinterpret_cast<uint16_t*>(vb + dst));
      } else {
        std::memcpy(kb + dst, k + src, D * sizeof(float));
        std::memcpy(vb + dst, v + src, D * sizeof(float));
      }
    }
}

void KVCache::read_rows(int64_t layer, int64_t from, int64_t n, float* k, float* v) const {
  if (from < 0 || n < 0 || from + n > size_)
    throw Error("KV cache read: entries [" + std::to_string(from) + ", " + std::to_string(from + n) + ") outside [0, " +
                std::to_string(size_) + ")");
  const int64_t s = slot(layer);
  if (s < 0) throw Error("KV cache read: layer " + std::to_string(layer) + " keeps no keys and values");
  const int64_t heads = heads_[static_cast<size_t>(s)], D = dims_[static_cast<size_t>(s)];
  const uint8_t* kb = keys_.get() + slot_offset(s);
  const uint8_t* vb = values_.get() + slot_offset(s);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t src = (h * capacity_ + from + i) * D * elem_bytes(), dst = (i * heads + h) * D;
      if (type_ == KVType::F16) {
        kernels::half_to_float(reinterpret_cast<const uint16_t*>(kb + src), D, k + dst);
        kernels::half_to_float(reinterpret_cast<const uint16_t*>(vb + src), D, v + dst);
      } else {
        std::memcpy(k + dst, kb + src, D * sizeof(float));
        std::memcpy(v + dst, vb + src, D * sizeof(float));
      }
    }
}

void KVCache::commit(int64_t n) {
  size_ += n;
  if (!states_.empty()) states_.commit(size_);
}

void KVCache::truncate(int64_t n) {
  if (n < 0 || n > size_)
    throw Error("KV cache truncate to " + std::to_string(n) + " outside [0, " + std::to_string(size_) + "]");
  if (!states_.empty()) states_.truncate(n);
  size_ = n;
}

void KVCache::move_entries(const KVCache& src, int64_t from, int64_t to, int64_t n) {
  for (size_t s = 0; s < heads_.size(); ++s) {
    const int64_t row = dims_[s] * elem_bytes();
    const size_t bytes = static_cast<size_t>(n * row);
    for (int64_t h = 0; h < heads_[s]; ++h) {
      const int64_t head = slot_offset(static_cast<int64_t>(s)) + h * capacity_ * row;
      const int64_t src_head = src.slot_offset(static_cast<int64_t>(s)) + h * src.capacity_ * row;
      std::memmove(keys_.get() + head + to * row, src.keys_.get() + src_head + from * row, bytes);
      std::memmove(values_.get() + head + to * row, src.values_.get() + src_head + from * row, bytes);
    }
  }
}

void KVCache::keep(int64_t base, const std::vector<int64_t>& rows) {
  if (base < 0 || base > size_) throw Error("KV cache keep: base " + std::to_string(base) + " out of range");
  const int64_t appended = size_ - base;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= appended || (i > 0 && rows[i] <= rows[i - 1]))
      throw Error("KV cache keep: rows must be strictly increasing offsets in [0, " + std::to_string(appended) + ")");
  }
  if (!states_.empty()) states_.keep(base, rows);
  // Rows increase and row i lands at i <= rows[i], so copying in order never
  // overwrites a row that is still to be read.
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t src = base + rows[i];
    const int64_t dst = base + static_cast<int64_t>(i);
    if (src != dst) move_entries(*this, src, dst, 1);
  }
  size_ = base + static_cast<int64_t>(rows.size());
}

KVCache KVCache::empty_like(int64_t capacity) const {
  KVCache out;
  out.layers_ = layers_;
  out.slots_ = slots_;
  out.heads_ = heads_;
  out.dims_ = dims_;
  out.bases_ = bases_;
  out.position_elems_ = position_elems_;
  out.capacity_ = capacity;
  out.max_capacity_ = max_capacity_;
  out.type_ = type_;
  if (!states_.empty()) out.states_ = RecurrentStates(states_.floats(), states_.window());
  out.allocate();
  return out;
}

KVCache KVCache::fork(int64_t n) const {
  KVCache out = empty_like(capacity_);
  out.copy_prefix_from(*this, n);
  return out;
}

void KVCache::copy_prefix_from(const KVCache& src, int64_t n) {
  if (n < 0 || n > src.size_) throw Error("KV cache fork: prefix " + std::to_string(n) + " longer than the source");
  if (layers_ != src.layers_ || slots_ != src.slots_ || heads_ != src.heads_ || dims_ != src.dims_ ||
      states_.floats() != src.states_.floats())
    throw Error("KV cache fork: caches belong to different model shapes");
  if (type_ != src.type_)
    throw Error(std::string("KV cache fork: an ") + kv_type_name(src.type_) + " cache into an " + kv_type_name(type_) +
                " one");
  if (n > capacity_) throw Error("KV cache fork: prefix " + std::to_string(n) + " exceeds capacity");
  if (!src.states_.empty()) states_ = src.states_.copy_at(n);
  move_entries(src, 0, 0, n);
  size_ = n;
}

}  // namespace splitspec

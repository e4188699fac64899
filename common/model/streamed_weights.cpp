#include "common/model/streamed_weights.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "common/kernels/linear.h"
#include "common/kernels/quant.h"
#include "common/util/error.h"
#include "common/util/stopwatch.h"
#include "common/model/gguf_model.h"
#include "common/model/weight_set.h"

namespace splitspec {

namespace {

// O_DIRECT wants offsets, lengths and buffers aligned to the logical block
// size; 4 KiB covers every device we expect.
constexpr uint64_t kAlign = 4096;

uint64_t round_down(uint64_t x, uint64_t a) { return x / a * a; }
uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

uint64_t span_of(uint64_t offset, uint64_t bytes) {
  return round_up(offset + bytes, kAlign) - round_down(offset, kAlign);
}

}  // namespace

StreamedWeights::StreamedWeights(const TensorLocator& locate, const ModelConfig& config, const StreamOptions& options)
    : options_(options), layers_(config.num_hidden_layers), hidden_(config.hidden_size), vocab_(config.vocab_size) {
  try {
    plan_units(locate, config);
    allocate(config);
    // One pass over every unit: proves the file readable and its values
    // finite, and fills the resident units.
    for (Unit& u : units_) {
      const uint8_t* v = read_checked(u);
      if (!u.resident) continue;
      std::memcpy(u.resident, v, u.raw_bytes);
      pack(u, u.resident, forward_scratch_);
    }
    for (int64_t i = 0; i < static_cast<int64_t>(units_.size()); ++i)
      if (!units_[i].resident) streamed_.push_back(i);
    bytes_read_ = 0;
    reads_ = 0;
    read_ms_ = 0;
    if (!streamed_.empty() && options_.pipeline) {
      if (ring_bytes_ == 0) throw Error("streamed weights: nothing to read ahead into (internal sizing error)");
      loader_ = std::thread([this] { loader_loop(); });
    }
  } catch (...) {
    for (uint8_t* p : allocations_) std::free(p);
    for (int fd : fds_) ::close(fd);
    throw;
  }
}

StreamedWeights::~StreamedWeights() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (loader_.joinable()) loader_.join();
  for (uint8_t* p : allocations_) std::free(p);
  for (int fd : fds_) ::close(fd);
}

void StreamedWeights::plan_units(const TensorLocator& locate, const ModelConfig& c) {
  std::map<std::string, int> file_index;
  auto file_of = [&](const std::string& path) {
    auto it = file_index.find(path);
    if (it != file_index.end()) return it->second;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (options_.direct_io ? O_DIRECT : 0));
    if (fd < 0 && options_.direct_io && errno == EINVAL) {
      direct_ = false;  // e.g. tmpfs: no direct I/O there
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
    if (!options_.direct_io) direct_ = false;
    fds_.push_back(fd);
    paths_.push_back(path);
    return file_index[path] = static_cast<int>(fds_.size()) - 1;
  };
  auto unit_of = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const StoredTensor t = locate(name, shape);
    Unit u;
    u.gain_less_one = t.gain_less_one;
    u.type = t.type;
    if (shape.size() == 1 && is_block_type(u.type)) throw Error(t.file + ": norm '" + name + "' must be F32, F16 or BF16");
    u.file = file_of(t.file);
    u.offset = t.offset;
    u.raw_bytes = t.bytes;
    u.rows = t.rows;
    u.cols = t.cols;
    u.rope_heads = t.rope_heads;
    u.head_dim = c.head_dim;
    return u;
  };
  const int64_t H = c.hidden_size;
  uint64_t largest = 0;
  unit_at_.assign(static_cast<size_t>(c.num_hidden_layers * kLayerMatrices), -1);
  int64_t two_layers = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (l == 2) two_layers = static_cast<int64_t>(units_.size());
    for (LayerMatrix lm : layer_matrices(c, l)) {
      unit_at_[static_cast<size_t>(l * kLayerMatrices + static_cast<int>(lm))] = static_cast<int64_t>(units_.size());
      units_.push_back(unit_of(layer_matrix_name(l, lm), layer_matrix_shape(lm, c, l)));
      largest = std::max(largest, units_.back().raw_bytes);
    }
  }
  first_layers_units_ = c.num_hidden_layers > 2 ? two_layers : static_cast<int64_t>(units_.size());
  head_unit0_ = static_cast<int64_t>(units_.size());
  // LM-head slices no larger than the largest layer matrix, so the head needs
  // no bigger read buffer than the layers do.
  head_is_embed_ = c.tie_word_embeddings;
  const Unit whole = unit_of(head_is_embed_ ? kEmbedName : kHeadName, {c.vocab_size, H});
  const uint64_t row_bytes = whole.raw_bytes / static_cast<uint64_t>(c.vocab_size);
  // Whole pairs of groups of 16 rows, so quantized slices pack completely
  // and their pairs read one stream each.
  const int64_t rows_per_chunk =
      std::max<int64_t>(kPairRows, static_cast<int64_t>(largest / row_bytes) / kPairRows * kPairRows);
  for (int64_t r0 = 0; r0 < c.vocab_size; r0 += rows_per_chunk) {
    Unit u = whole;
    u.row0 = r0;
    u.rows = std::min(rows_per_chunk, c.vocab_size - r0);
    u.offset = whole.offset + static_cast<uint64_t>(r0) * row_bytes;
    u.raw_bytes = static_cast<uint64_t>(u.rows) * row_bytes;
    units_.push_back(u);
    ++head_chunks_;
  }
  const Unit embed = unit_of(kEmbedName, {c.vocab_size, H});
  embed_file_ = embed.file;
  embed_type_ = embed.type;
  embed_offset_ = embed.offset;
  embed_row_bytes_ = embed.raw_bytes / static_cast<uint64_t>(c.vocab_size);

  if (const int64_t P = c.per_layer_input_size) {
    const int64_t L = c.num_hidden_layers;
    per_layer_embed_ = unit_of(kPerLayerEmbedName, {c.vocab_size, L * P});
    per_layer_proj_ = unit_of(kPerLayerProjName, {L * P, H});
    per_layer_norm_ = unit_of(kPerLayerNormName, {P});
    per_layer_row_bytes_ = per_layer_embed_.raw_bytes / static_cast<uint64_t>(c.vocab_size);
  }
  // The norms are read once, below, into norms_.
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (bool post : {false, true}) norm_units_.push_back(unit_of(layer_norm_name(l, post), {H}));
  norm_units_.push_back(unit_of(kFinalNormName, {H}));
  vector_at_.assign(static_cast<size_t>(c.num_hidden_layers * kLayerVectors), -1);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (int v = 0; v < kLayerVectors; ++v)
      if (const int64_t size = layer_vector_size(static_cast<LayerVector>(v), c, l)) {
        vector_at_[l * kLayerVectors + v] = vector_floats_;
        vector_units_.push_back(unit_of(layer_vector_name(l, static_cast<LayerVector>(v)), {size}));
        vector_floats_ += size;
      }
}

uint8_t* StreamedWeights::alloc(uint64_t bytes, uint64_t align) {
  bytes = round_up(std::max<uint64_t>(bytes, 1), align);
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(align, bytes));
  if (!p) throw Error("streamed weights: cannot allocate " + format_bytes(bytes));
  allocations_.push_back(p);
  allocated_ += bytes;
  peak_ = std::max(peak_, allocated_);
  return p;
}

void StreamedWeights::allocate(const ModelConfig& c) {
  const uint64_t budget = options_.budget_bytes;
  uint64_t need = 0, weights = 0, largest_span = 0;
  for (const Unit& u : units_) {
    const uint64_t span = span_of(u.offset, u.raw_bytes);
    largest_span = std::max(largest_span, span);
    need = std::max(need, span);
    weights += u.raw_bytes;
  }
  for (const auto* list : {&norm_units_, &vector_units_})
    for (const Unit& u : *list) {
      weights += static_cast<uint64_t>(u.cols) * sizeof(float);  // held as fp32
      need = std::max(need, span_of(u.offset, u.raw_bytes));
    }
  if (!head_is_embed_) weights += embed_row_bytes_ * static_cast<uint64_t>(c.vocab_size);
  uint64_t per_layer_bytes = 0;  // held: the projection as stored (packed in place), the norm as fp32
  if (per_layer_proj_.raw_bytes) {
    per_layer_bytes = round_up(per_layer_proj_.raw_bytes, 64) + round_up(per_layer_norm_.cols * sizeof(float), 64);
    weights += per_layer_embed_.raw_bytes + per_layer_proj_.raw_bytes + per_layer_norm_.cols * sizeof(float);
    need = std::max({need, span_of(per_layer_proj_.offset, per_layer_proj_.raw_bytes),
                     span_of(per_layer_norm_.offset, per_layer_norm_.raw_bytes)});
  }
  weight_bytes_ = weights;
  buffer_bytes_ = round_up(need, kAlign);
  row_buffer_bytes_ = round_up(std::max(embed_row_bytes_, per_layer_row_bytes_), kAlign) + kAlign;
  const uint64_t norm_bytes = static_cast<uint64_t>(norm_units_.size() * c.hidden_size) * sizeof(float);
  const uint64_t vector_bytes = static_cast<uint64_t>(vector_floats_) * sizeof(float);
  const uint64_t row_fp32 = static_cast<uint64_t>(c.hidden_size) * sizeof(float);
  cached_rows_ = static_cast<int64_t>(std::min<uint64_t>({256, static_cast<uint64_t>(c.vocab_size), budget / 16 / row_fp32}));
  const uint64_t cache_bytes = cached_rows_ * row_fp32;
  fixed_bytes_ = round_up(norm_bytes, 64) + round_up(vector_bytes, 64) + row_buffer_bytes_ + per_layer_bytes +
                (cached_rows_ > 0 ? round_up(cache_bytes, 64) : 0);
  uint64_t all_resident = fixed_bytes_ + buffer_bytes_;
  for (const Unit& u : units_) all_resident += round_up(u.raw_bytes, 64);
  // With everything resident there is nothing to read ahead.
  if (options_.pipeline && all_resident > budget) {
    uint64_t ring = options_.read_ahead_bytes;
    if (ring == 0) {
      // Two layers as stored: the time between forwards (drafting) is then
      // spent reading the next forward's first layers, and the forward
      // starts on weights already in memory. Never more than the budget has
      // left, and never less than the largest unit.
      for (int64_t i = 0; i < first_layers_units_; ++i)
        ring += span_of(units_[i].offset, units_[i].raw_bytes);
      const uint64_t used = fixed_bytes_ + buffer_bytes_;
      ring = std::max(std::min(ring, budget > used ? round_down(budget - used, kAlign) : 0), largest_span);
    }
    ring_bytes_ = round_up(ring, kAlign);
    if (ring_bytes_ < largest_span)
      throw Error("read-ahead " + format_bytes(ring_bytes_) + " cannot hold this target's largest matrix as stored (" +
                  format_bytes(largest_span) + ")");
  }
  const uint64_t minimum = fixed_bytes_ + buffer_bytes_ + ring_bytes_;
  if (budget < minimum)
    throw Error("memory budget " + format_bytes(budget) + " is too small to stream this target: it needs at least " +
                format_bytes(minimum) + " (a work buffer of " + format_bytes(buffer_bytes_) + " for its largest matrix, " +
                (ring_bytes_ ? format_bytes(ring_bytes_) + " of read-ahead, " : std::string()) + "plus " +
                format_bytes(fixed_bytes_) + " of norms and embedding rows); the whole model is " + format_bytes(weights) +
                " as stored");
  norms_ = reinterpret_cast<float*>(alloc(norm_bytes, 64));
  row_buffer_ = alloc(row_buffer_bytes_, kAlign);
  if (cached_rows_ > 0) row_cache_ = reinterpret_cast<float*>(alloc(cache_bytes, 64));
  cached_id_.assign(cached_rows_, -1);
  cache_used_.assign(cached_rows_, 0);
  work_ = alloc(buffer_bytes_, kAlign);
  if (ring_bytes_) ring_ = alloc(ring_bytes_, kAlign);
  // Gemma's gains as we hold them, 1 + the file's.
  auto shift = [](const Unit& u, float* v) {
    if (u.gain_less_one)
      for (int64_t i = 0; i < u.cols; ++i) v[i] += 1.0f;
  };
  for (size_t i = 0; i < norm_units_.size(); ++i) {
    dequantize_rows(ref(norm_units_[i], read_checked(norm_units_[i])), 0, 1, norms_ + i * c.hidden_size);
    shift(norm_units_[i], norms_ + i * c.hidden_size);
  }
  if (vector_floats_ > 0) {
    vectors_ = reinterpret_cast<float*>(alloc(vector_bytes, 64));
    float* at = vectors_;
    for (const Unit& u : vector_units_) {
      dequantize_rows(ref(u, read_checked(u)), 0, 1, at);
      shift(u, at);
      at += u.cols;
    }
  }
  if (per_layer_bytes) {
    const Unit& u = per_layer_proj_;
    uint8_t* proj = alloc(u.raw_bytes, 64);
    std::memcpy(proj, read_checked(u), u.raw_bytes);
    pack(u, proj, forward_scratch_);
    per_layer_.proj = ref(u, proj, true);
    per_layer_.norm.resize(static_cast<size_t>(per_layer_norm_.cols));
    dequantize_rows(ref(per_layer_norm_, read_checked(per_layer_norm_)), 0, 1, per_layer_.norm.data());
  }
  // What fits stays resident, taken in forward order. Every unit is read
  // exactly once per forward, so which ones stay does not change the bytes
  // streamed; the earliest ones give the loader a head start each forward.
  for (Unit& u : units_) {
    const uint64_t bytes = round_up(u.raw_bytes, 64);
    if (allocated_ + bytes <= budget) {
      u.resident = alloc(bytes, 64);
      resident_bytes_ += bytes;
    }
  }
}

void StreamedWeights::read_span(int file, uint64_t offset, uint64_t bytes, uint64_t needed, uint8_t* dst) {
  const int fd = fds_[file];
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, dst + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL && direct_) {
        // The file system accepted O_DIRECT at open but refuses it on reads.
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT);
        direct_ = false;
        continue;
      }
      throw Error(paths_[file] + ": read failed: " + std::strerror(errno));
    }
    if (n == 0) break;  // end of file: the aligned span may reach past it
    done += static_cast<uint64_t>(n);
  }
  if (done < needed) throw Error(paths_[file] + ": file is truncated (weights end past its end)");
  if (!direct_) ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(bytes), POSIX_FADV_DONTNEED);
}

void StreamedWeights::pack(const Unit& u, uint8_t* data, std::vector<uint8_t>& scratch) const {
  if (u.rope_heads) {
    const int64_t rb = row_bytes(u.type, u.cols);
    const WeightBytes ordered = permute_rope_rows(data, u.rope_heads * u.head_dim, u.head_dim, rb, false);
    std::memcpy(data, ordered.data(), ordered.size());
  }
  if (stored_packed(u.type)) pack_rows(u.type, data, u.rows, u.cols, scratch);
}

uint8_t* StreamedWeights::read_raw(const Unit& u, uint8_t* dst) {
  const uint64_t start = round_down(u.offset, kAlign);
  read_span(u.file, start, span_of(u.offset, u.raw_bytes), u.offset + u.raw_bytes - start, dst);
  return dst + (u.offset - start);
}

uint8_t* StreamedWeights::read_unit(const Unit& u) { return read_raw(u, work_); }

uint8_t* StreamedWeights::read_checked(const Unit& u) {
  uint8_t* v = read_unit(u);
  if (first_non_finite_row(ref(u, v)) >= 0)
    throw Error(paths_[u.file] + ": weights at byte " + std::to_string(u.offset) + " contain NaN or infinite values");
  return v;
}

void StreamedWeights::loader_loop() {
  const uint64_t cycle = streamed_.size();
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    const Unit& u = units_[streamed_[loaded_ % cycle]];
    const uint64_t span = span_of(u.offset, u.raw_bytes);
    uint64_t start = ring_end_;
    if (start % ring_bytes_ + span > ring_bytes_) start = round_up(start, ring_bytes_);
    cv_.wait(lk, [&] { return stop_ || start + span - (in_ring_.empty() ? start : in_ring_.front().first) <= ring_bytes_; });
    if (stop_) return;
    lk.unlock();
    const auto t0 = SteadyClock::now();
    std::string error;
    try {
      pack(u, read_raw(u, ring_ + start % ring_bytes_), loader_scratch_);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const double ms = ms_since(t0);
    lk.lock();
    read_ms_ += ms;
    if (!error.empty()) {
      read_error_ = error;
      cv_.notify_all();
      return;
    }
    in_ring_.emplace_back(start, start + span);
    ring_end_ = start + span;
    ++loaded_;
    bytes_read_ += u.raw_bytes;
    reads_ += 1;
    cv_.notify_all();
  }
}

void StreamedWeights::begin_forward() {
  std::unique_lock<std::mutex> one(forward_mu_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!read_error_.empty()) throw Error(read_error_);
  }
  forward_lock_ = std::move(one);
  next_unit_ = 0;
  holding_ = false;
}

MatrixRef StreamedWeights::acquire_unit(int64_t index) {
  if (!forward_lock_.owns_lock() || holding_ || index != next_unit_)
    throw Error("streamed weights: unit " + std::to_string(index) + " taken out of order (expected " +
                std::to_string(next_unit_) + ")");
  const Unit& u = units_[index];
  ++next_unit_;
  holding_ = true;
  if (u.resident) return ref(u, u.resident, true);
  const auto t0 = SteadyClock::now();
  waiting_.store(true, std::memory_order_relaxed);
  struct Idle {
    std::atomic<bool>& w;
    ~Idle() { w.store(false, std::memory_order_relaxed); }
  } idle{waiting_};
  if (!options_.pipeline) {
    uint8_t* p = read_unit(u);
    pack(u, p, forward_scratch_);
    const double ms = ms_since(t0);
    std::lock_guard<std::mutex> lk(mu_);
    read_ms_ += ms;
    stall_ms_ += ms;
    bytes_read_ += u.raw_bytes;
    reads_ += 1;
    return ref(u, p, true);
  }
  std::unique_lock<std::mutex> lk(mu_);
  const bool loaded = wait_next(lk);
  stall_ms_ += ms_since(t0);
  if (!loaded) throw Error(read_error_);
  // Only this thread takes units out, so the loader leaves this one alone
  // until release() gives its ring space back.
  holding_ring_ = true;
  return ref(u, ring_ + in_ring_.front().first % ring_bytes_ + u.offset % kAlign, true);
}

MatrixRef StreamedWeights::acquire(int64_t layer, LayerMatrix m) {
  return acquire_unit(unit_at_[static_cast<size_t>(layer * kLayerMatrices + static_cast<int64_t>(m))]);
}

MatrixRef StreamedWeights::acquire_head(int64_t chunk, int64_t* row0, int64_t* rows) {
  const int64_t index = head_unit0_ + chunk;
  const MatrixRef m = acquire_unit(index);
  *row0 = units_[index].row0;
  *rows = units_[index].rows;
  return m;
}

void StreamedWeights::head(const float* normed, int64_t m, float* logits) {
  std::vector<float> part;
  for (int64_t chunk = 0; chunk < head_chunks_; ++chunk) {
    int64_t row0 = 0, count = 0;
    const MatrixRef w = acquire_head(chunk, &row0, &count);
    if (m > 0) {
      part.resize(static_cast<size_t>(m * count));
      kernels::linear(normed, m, w, part.data());
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(logits + r * vocab_ + row0, part.data() + r * count, count * sizeof(float));
    }
    release();
  }
}

bool StreamedWeights::wait_next(std::unique_lock<std::mutex>& lk) {
  cv_.wait(lk, [&] { return !in_ring_.empty() || !read_error_.empty(); });
  return !in_ring_.empty();
}

void StreamedWeights::release() {
  holding_ = false;
  if (!holding_ring_) return;
  holding_ring_ = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    in_ring_.pop_front();
  }
  cv_.notify_all();
}

void StreamedWeights::end_forward() noexcept {
  if (!forward_lock_.owns_lock()) return;
  release();
  // A forward cut short (an exception) still passes its remaining units, so
  // the loader's order and the next forward's stay aligned.
  if (options_.pipeline) {
    std::unique_lock<std::mutex> lk(mu_);
    for (int64_t i = next_unit_; i < static_cast<int64_t>(units_.size()); ++i) {
      if (units_[i].resident) continue;
      if (!wait_next(lk)) break;
      in_ring_.pop_front();
      cv_.notify_all();
    }
  }
  next_unit_ = static_cast<int64_t>(units_.size());
  ++forwards_;
  forward_lock_.unlock();
}

void StreamedWeights::embed(const int64_t* ids, int64_t n, float* out) {
  const int64_t H = hidden_;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    float* row = out + i * H;
    if (head_is_embed_) {
      const Unit& chunk = units_[head_unit0_ + id / units_[head_unit0_].rows];
      if (chunk.resident) {
        dequantize_rows(ref(chunk, chunk.resident, true), id - chunk.row0, id - chunk.row0 + 1, row);
        continue;
      }
    }
    auto hit = cache_slot_.find(id);
    if (hit != cache_slot_.end()) {
      std::memcpy(row, row_cache_ + hit->second * H, H * sizeof(float));
      cache_used_[hit->second] = 1;
      std::lock_guard<std::mutex> lk(mu_);
      ++row_hits_;
      continue;
    }
    read_row(embed_file_, embed_offset_ + static_cast<uint64_t>(id) * embed_row_bytes_, embed_row_bytes_, embed_type_, H,
             row);
    if (cached_rows_ == 0) continue;
    while (cache_used_[clock_hand_]) {
      cache_used_[clock_hand_] = 0;
      clock_hand_ = (clock_hand_ + 1) % cached_rows_;
    }
    if (cached_id_[clock_hand_] >= 0) cache_slot_.erase(cached_id_[clock_hand_]);
    cached_id_[clock_hand_] = id;
    cache_slot_[id] = clock_hand_;
    std::memcpy(row_cache_ + clock_hand_ * H, row, H * sizeof(float));
    cache_used_[clock_hand_] = 1;
    clock_hand_ = (clock_hand_ + 1) % cached_rows_;
  }
}

void StreamedWeights::per_layer_embed(const int64_t* ids, int64_t n, float* out) {
  const Unit& u = per_layer_embed_;
  for (int64_t i = 0; i < n; ++i)
    read_row(u.file, u.offset + static_cast<uint64_t>(ids[i]) * per_layer_row_bytes_, per_layer_row_bytes_, u.type,
             u.cols, out + i * u.cols);
}

void StreamedWeights::read_row(int file, uint64_t offset, uint64_t bytes, WType type, int64_t cols, float* out) {
  const uint64_t start = round_down(offset, kAlign);
  const auto t0 = SteadyClock::now();
  read_span(file, start, span_of(offset, bytes), offset + bytes - start, row_buffer_);
  dequantize_rows(MatrixRef{type, row_buffer_ + (offset - start), 1, cols}, 0, 1, out);
  std::lock_guard<std::mutex> lk(mu_);
  read_ms_ += ms_since(t0);
  bytes_read_ += bytes;
  reads_ += 1;
}

StreamStats StreamedWeights::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  StreamStats s;
  s.budget_bytes = options_.budget_bytes;
  s.weight_bytes = weight_bytes_;
  s.resident_bytes = resident_bytes_;
  s.pool_bytes = buffer_bytes_ + ring_bytes_;
  s.fixed_bytes = fixed_bytes_;
  s.peak_bytes = peak_;
  for (int64_t i : streamed_) s.streamed_bytes_per_forward += units_[i].raw_bytes;
  s.units = static_cast<int64_t>(units_.size());
  s.resident_units = s.units - static_cast<int64_t>(streamed_.size());
  s.forwards = forwards_;
  s.bytes_read = bytes_read_;
  s.reads = reads_;
  s.embedding_cache_hits = row_hits_;
  s.read_ms = read_ms_;
  s.stall_ms = stall_ms_;
  s.io_mode = direct_ ? "O_DIRECT" : "buffered, POSIX_FADV_DONTNEED";
  return s;
}

uint64_t parse_bytes(const std::string& text, uint64_t whole) {
  const auto bad = [&] {
    return Error("cannot read '" + text + "' as a size: use bytes, a unit (KB, MB, GB = 1000^n; KiB, MiB, GiB = 1024^n) " +
                 "or a percentage of the target's weights (25%)");
  };
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  std::string unit = text.substr(used);
  unit.erase(0, unit.find_first_not_of(' '));
  for (char& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kb" || unit == "k") scale = 1e3;
  else if (unit == "mb" || unit == "m") scale = 1e6;
  else if (unit == "gb" || unit == "g") scale = 1e9;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "%") {
    if (whole == 0) throw Error("'" + text + "': a percentage needs the target's size");
    scale = static_cast<double>(whole) / 100.0;
  } else {
    throw bad();
  }
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes <= 0 || bytes > 1e18) throw bad();
  return static_cast<uint64_t>(bytes);
}

std::string format_bytes(uint64_t bytes) {
  std::ostringstream out;
  out.precision(3);
  if (bytes >= (1ull << 30)) out << static_cast<double>(bytes) / (1ull << 30) << " GiB";
  else if (bytes >= (1ull << 20)) out << static_cast<double>(bytes) / (1ull << 20) << " MiB";
  else if (bytes >= (1ull << 10)) out << static_cast<double>(bytes) / (1ull << 10) << " KiB";
  else out << bytes << " B";
  return out.str();
}

}  // namespace splitspec

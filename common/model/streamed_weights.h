#pragma once
// A target's weights streamed from disk under a memory budget: EdgeLLM's
// setting, where the target does not fit in memory (EdgeLLM, §II, §III-D).
//
// All weight memory is allocated once, up front, and never exceeds the
// budget: the norms, a small cache of embedding rows, a work buffer that
// holds one unit as fp32, a read-ahead ring (with pipelining), and as many
// whole units (one layer matrix, or a slice of LM-head rows) as fit in what
// is left; those stay resident. Every other unit is read again from the file
// on every forward, with O_DIRECT so that the page cache cannot quietly keep
// the model in memory, used as stored (the kernels read every weight type),
// and released. All of it counts bytes as stored: a Q4_0 target reads about
// a seventh of its F32 bytes per forward and fits a budget a seventh the size.
//
// A forward takes the units in one fixed order (layer by layer, in the order
// the layer uses its matrices, then the LM head). Without pipelining (the
// paper's Std baseline) each unit is read when the forward reaches it. With
// it (StdPL), a loader thread reads ahead while earlier units compute, as far
// as the ring allows, and keeps going into the next forward's units while
// the forward ends, so the time between forwards (drafting) loads weights too.
// The forward computes on each unit where it lies in the ring and gives the
// space back when it releases it.
//
// Free of LibTorch; one forward at a time.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/kernels/weight_type.h"
#include "common/model/model_config.h"
#include "common/weights/safetensors.h"
#include "common/model/weight_names.h"
#include "common/model/weight_provider.h"

namespace splitspec {

struct StreamOptions {
  uint64_t budget_bytes = 0;  // target weights in memory, at most (bytes as stored)
  bool pipeline = true;       // StdPL: read ahead on a loader thread; false: Std
  uint64_t read_ahead_bytes = 0;  // with pipelining: file bytes the loader may hold ahead of the
                                  // forward; 0 picks two layers as stored, or what the budget has left
  bool direct_io = true;      // O_DIRECT; where the file system refuses it, or when false,
                              // buffered reads dropped from the page cache after each read
};

struct StreamStats {
  uint64_t budget_bytes = 0;
  uint64_t weight_bytes = 0;     // all weights as stored: the in-memory model's size
  uint64_t resident_bytes = 0;   // units kept in memory
  uint64_t pool_bytes = 0;       // the work buffer and the read-ahead ring
  uint64_t fixed_bytes = 0;      // norms and the embedding row buffer
  uint64_t peak_bytes = 0;       // most weight memory ever allocated at once
  uint64_t streamed_bytes_per_forward = 0;  // file bytes read by each forward
  int64_t units = 0, resident_units = 0;
  int64_t forwards = 0;
  uint64_t bytes_read = 0;  // from the file since construction (validation pass excluded)
  int64_t embedding_cache_hits = 0;
  int64_t reads = 0;
  double read_ms = 0;   // reading, on whichever thread did it, and converting
  double stall_ms = 0;  // forwards waiting for a unit
  std::string io_mode;  // "O_DIRECT" or "buffered, POSIX_FADV_DONTNEED"
};

class StreamedWeights final : public WeightProvider {
 public:
  // Reads every unit once to check it (finite values, readable file), then
  // keeps what fits. Throws splitspec::Error naming the file for a missing or
  // corrupt model, and for a budget too small to stream with: it must hold
  // the norms, the row buffer, the work buffer and the ring (its message says
  // how much).
  // `locate` finds each tensor in the model's files (weight_set.h); it is not
  // kept.
  StreamedWeights(const TensorLocator& locate, const ModelConfig& config, const StreamOptions& options);
  ~StreamedWeights();
  StreamedWeights(const StreamedWeights&) = delete;
  StreamedWeights& operator=(const StreamedWeights&) = delete;

  const float* input_norm(int64_t layer) const override { return norms_ + (2 * layer) * hidden_; }
  const float* post_norm(int64_t layer) const override { return norms_ + (2 * layer + 1) * hidden_; }
  const float* final_norm() const override { return norms_ + 2 * layers_ * hidden_; }
  // Layer l's family vector (weight_names.h), or null when it has none.
  const float* vector(int64_t layer, LayerVector v) const override {
    const int64_t at = vector_at_[static_cast<size_t>(layer * kLayerVectors + static_cast<int>(v))];
    return at < 0 ? nullptr : vectors_ + at;
  }

  // One forward: begin, then acquire/release every unit in order, then end.
  // A streamed unit's values stay valid until the next acquire.
  // end_forward() also skips whatever a forward cut short left unused, so the
  // next one starts in step. acquire* blocks until the unit is in memory and
  // throws splitspec::Error if reading it failed.
  void begin_forward() override;
  MatrixRef acquire(int64_t layer, LayerMatrix m) override;
  void release() override;
  void end_forward() noexcept override;
  // The LM head slice by slice of vocabulary rows: every logit is the dot
  // product the whole matrix gives, so the values are bitwise the same.
  void head(const float* normed, int64_t m, float* logits) override;

  // Embedding rows of `ids` into out[n, hidden].
  void embed(const int64_t* ids, int64_t n, float* out) override;
  // Gemma 4's per-layer inputs: the projection and norm held with the norms,
  // the per-layer embedding read a row a token, as the embedding is.
  const PerLayerInputs* per_layer_inputs() const override { return per_layer_.proj.data ? &per_layer_ : nullptr; }
  void per_layer_embed(const int64_t* ids, int64_t n, float* out) override;

  // True while a forward waits for a read: the CPU is idle, so other work
  // (provisional drafting) can run without slowing the forward down.
  bool forward_waiting() const { return waiting_.load(std::memory_order_relaxed); }
  StreamStats stats() const;
  // The layer matrices' type.
  WType weight_type() const { return units_.empty() ? WType::F32 : units_[0].type; }

 private:
  struct Unit {
    int file = 0;
    WType type = WType::F32;
    uint64_t offset = 0;     // first byte in the file
    uint64_t raw_bytes = 0;  // bytes in the file
    int64_t rows = 0, cols = 0;
    int64_t row0 = 0;        // head chunks: their first LM-head row
    uint8_t* resident = nullptr;
    bool gain_less_one = false;  // a Gemma gain as Hugging Face holds it (hf_gain_less_one)
    int64_t rope_heads = 0, head_dim = 0;  // rows to put back in order once read (StoredTensor)
  };

  void plan_units(const TensorLocator& locate, const ModelConfig& c);
  void allocate(const ModelConfig& c);
  uint8_t* alloc(uint64_t bytes, uint64_t align);
  // Reads `u`'s 4 KiB-aligned span into dst; returns where its bytes start.
  uint8_t* read_raw(const Unit& u, uint8_t* dst);
  // Reads `u` into the work buffer; its (plain) bytes lie where this points.
  uint8_t* read_unit(const Unit& u);
  // read_unit, refusing NaN and infinite values.
  uint8_t* read_checked(const Unit& u);
  std::vector<uint8_t> forward_scratch_, loader_scratch_;
  // `u`'s bytes at `data`, as read (plain) or packed for the kernels.
  MatrixRef ref(const Unit& u, const uint8_t* data, bool packed = false) const {
    return {u.type, data, u.rows, u.cols, packed && stored_packed(u.type)};
  }
  // Puts a unit's rows in order and packs a quantized one's bytes in place
  // (weight_type.h); others as they are.
  void pack(const Unit& u, uint8_t* data, std::vector<uint8_t>& scratch) const;
  // Under mu_: waits until the next streamed unit is in the ring; false if
  // the loader failed before reading it.
  bool wait_next(std::unique_lock<std::mutex>& lk);
  // `bytes` from `offset` into dst (all aligned for O_DIRECT); the file must
  // hold at least `needed` of them.
  void read_span(int file, uint64_t offset, uint64_t bytes, uint64_t needed, uint8_t* dst);
  MatrixRef acquire_unit(int64_t index);
  // One row of `bytes` at `offset` through the row buffer, as fp32 `cols`
  // into out (an embedding's row), counted as read.
  void read_row(int file, uint64_t offset, uint64_t bytes, WType type, int64_t cols, float* out);
  // LM-head rows [*row0, *row0 + *rows) as [rows, hidden].
  MatrixRef acquire_head(int64_t chunk, int64_t* row0, int64_t* rows);
  void loader_loop();

  StreamOptions options_;
  int64_t layers_ = 0, hidden_ = 0, vocab_ = 0;
  std::vector<std::string> paths_;
  std::vector<int> fds_;
  bool direct_ = true;
  std::vector<Unit> units_;        // forward order
  std::vector<Unit> norm_units_;   // read once into norms_
  std::vector<Unit> vector_units_; // read once into vectors_
  std::vector<int64_t> vector_at_; // [layer * kLayerVectors + v]: offset in vectors_, or -1
  int64_t vector_floats_ = 0;
  float* vectors_ = nullptr;
  std::vector<int64_t> streamed_;  // indices of the units not resident, forward order
  int64_t head_chunks_ = 0;
  // units_'s index of layer l's matrix m ([l * kLayerMatrices + m], -1 where
  // the layer has none), of the head's first chunk, and how many units the
  // first two layers take.
  std::vector<int64_t> unit_at_;
  int64_t head_unit0_ = 0, first_layers_units_ = 0;
  bool head_is_embed_ = false;
  int embed_file_ = 0;
  WType embed_type_ = WType::F32;
  uint64_t embed_offset_ = 0, embed_row_bytes_ = 0;

  // All weight memory, allocated in the constructor only.
  std::vector<uint8_t*> allocations_;
  uint64_t allocated_ = 0, peak_ = 0;
  uint64_t weight_bytes_ = 0, fixed_bytes_ = 0, resident_bytes_ = 0;
  float* norms_ = nullptr;  // [2 * layers + 1, hidden]
  uint8_t* row_buffer_ = nullptr;
  uint64_t row_buffer_bytes_ = 0;
  // Per-layer inputs (per_layer_inputs()): the embedding's rows are read by
  // id from its unit into the row buffer; the projection is read once.
  PerLayerInputs per_layer_;
  Unit per_layer_embed_, per_layer_proj_, per_layer_norm_;
  uint64_t per_layer_row_bytes_ = 0;
  // Embedding rows read lately. A direct read of one row costs a device
  // round trip (~0.15 ms here), and a tree verification looks up a row per
  // node; frequent tokens recur, so a small cache saves most of those reads.
  // Replacement is the clock algorithm. Up to 256 rows, and at most a
  // sixteenth of the budget.
  int64_t cached_rows_ = 0;
  float* row_cache_ = nullptr;  // [cached_rows_, hidden]
  std::vector<int64_t> cached_id_;
  std::vector<char> cache_used_;
  std::unordered_map<int64_t, int64_t> cache_slot_;
  int64_t clock_hand_ = 0;
  int64_t row_hits_ = 0;
  uint64_t buffer_bytes_ = 0;  // the work buffer: the largest unit's span
  uint8_t* work_ = nullptr;
  uint64_t ring_bytes_ = 0;
  uint8_t* ring_ = nullptr;

  // The forward in progress (forward_lock_ held from begin to end).
  std::mutex forward_mu_;
  std::unique_lock<std::mutex> forward_lock_;
  int64_t next_unit_ = 0;
  bool holding_ = false;
  bool holding_ring_ = false;  // the held unit lies in the ring

  // Streamed units are numbered by a sequence running across forwards:
  // number s is streamed_[s % streamed_.size()]. The loader reads them in
  // order into the ring, each at the next free ring position (skipping to the
  // ring's start where its span would not fit before the end), as long as the
  // ring holds it besides the ones read and not yet taken. Ring positions are
  // counted on without wrapping; position p lies at ring_ + p % ring_bytes_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t loaded_ = 0;    // numbers below this have been read
  uint64_t ring_end_ = 0;  // where the last one read ends
  // [start, end) of the units read and not yet taken out, oldest first: the
  // forward takes number loaded_ - in_ring_.size() next.
  std::deque<std::pair<uint64_t, uint64_t>> in_ring_;
  std::string read_error_;
  bool stop_ = false;
  std::thread loader_;
  std::atomic<bool> waiting_{false};

  int64_t forwards_ = 0;
  uint64_t bytes_read_ = 0;
  int64_t reads_ = 0;
  double read_ms_ = 0, stall_ms_ = 0;
};

// "8MiB", "512KiB", "1.5GB", "25%" (of `whole`), or plain bytes. Throws
// splitspec::Error on anything else.
uint64_t parse_bytes(const std::string& text, uint64_t whole = 0);
std::string format_bytes(uint64_t bytes);

}  // namespace splitspec

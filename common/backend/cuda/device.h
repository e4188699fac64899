#pragma once
// The CUDA backend's internals: errors, device memory, a matrix in its device
// layout, and the kernels' launchers (each .cu file defines its own). Not a
// public header: it includes the CUDA runtime.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/backend/cuda/block_arith.h"
#include "common/kernels/weight_type.h"

namespace splitspec::cuda {

// Throws splitspec::Error naming `what` and the CUDA error. An error that
// leaves the context unusable (a fault in a kernel) is sticky: every later
// call fails too, and the backend reports it through fatal_error().
void check(cudaError_t e, const char* what);
#define SPLITSPEC_CUDA(call) ::splitspec::cuda::check((call), #call)
// The last launch's error, if any.
void check_launch(const char* kernel);
// Whether `e` leaves the context unusable.
bool sticky(cudaError_t e);

// Device memory, freed with its owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }
  // At least `bytes`, contents not kept.
  void ensure(size_t bytes);

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory, for copies that overlap the compute.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void ensure(size_t bytes);
  void* get() const { return p_; }
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// A weight matrix [rows, cols] in its device layout (device_weights.cpp):
//   BF16, F16: tiles of 16 x 16 in tensor-core fragment order (warp_math.h
//     tiled_offset), rows and columns padded with zeros to 16.
//   F32: rows back to back.
//   Q8_0: `q` the quants [rows][cols], `d` the half scales [rows][cols/32].
//   Q4_K: `q` [rows][blocks][128] quant bytes, `s` [rows][blocks][12] scale
//     bytes, `d` [rows][blocks][2] halves (d, dmin).
//   Q6_K: `q` [rows][blocks][192] (128 low, 64 high quant bytes), `s`
//     [rows][blocks][16] scales, `d` [rows][blocks] halves.
struct DeviceMatrix {
  WType type = WType::F32;
  int64_t rows = 0, cols = 0;
  const void* q = nullptr;
  const void* s = nullptr;
  const void* d = nullptr;
  SPLITSPEC_HD int64_t blocks() const { return cols / (type == WType::Q8_0 ? 32 : 256); }
};

// The types the GPU runs, as a sentence for errors.
const char* gpu_weight_types();
bool gpu_runs(WType t);

// Scratch for one linear call: its activations quantized or tiled, and its
// partial sums. Grown as a call needs (before a forward starts).
struct LinearScratch {
  DeviceBuffer xq, xd, bsums, xt, partials;
};
// Bytes of scratch a call of `n` rows on `w` needs, by buffer.
struct ScratchNeed {
  size_t xq = 0, xd = 0, bsums = 0, xt = 0, partials = 0;
};
ScratchNeed linear_scratch(const DeviceMatrix& w, int64_t n);

// y[n, w.rows] = x[n, w.cols] . w^T on `stream`. Quantized types: x is
// quantized per row as the CPU does and each output is the CPU reference's
// bit for bit (linear.h). Float types: fixed tiles and a fixed split of the
// columns into chunks of kFloatChunk, summed in order, so each output
// depends on its own row alone (batch-invariant). `prepared`: x was already
// quantized (or tiled) into `scratch` for a matrix of the same type and
// width (q, k and v share their input).
constexpr int64_t kFloatChunk = 512;
void linear(const DeviceMatrix& w, const float* x, int64_t n, float* y, LinearScratch& scratch, bool prepared,
            cudaStream_t stream);
// Whether two matrices take their input prepared the same way.
bool same_preparation(const DeviceMatrix& a, const DeviceMatrix& b);

// ---- The forward's other kernels (ops.cu) --------------------------------

// Per row of `dim`: y = x / sqrt(mean(x^2) + eps) * weight (the mean summed
// in double, in a fixed order).
void rms_norm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* y, cudaStream_t stream);
// Rows `rows` (device indices) of x [*, dim] through the norm into y [count, dim].
void rms_norm_rows(const float* x, const int32_t* rows, int64_t count, int64_t dim, const float* weight, float eps,
                   float* y, cudaStream_t stream);
// x[n, heads, head_dim] rotated in halves by each row's position (cos, sin:
// tables [max_positions, head_dim / 2]).
void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const int32_t* positions, const float* cos,
          const float* sin, cudaStream_t stream);
void add_bias(float* x, int64_t rows, int64_t cols, const float* bias, cudaStream_t stream);
void add_inplace(float* x, const float* d, int64_t count, cudaStream_t stream);
void silu_mul(float* gate, const float* up, int64_t count, cudaStream_t stream);
// Rows `ids` of an embedding matrix as floats: exactly the CPU's values.
void embed(const DeviceMatrix& w, const int32_t* ids, int64_t n, float* out, cudaStream_t stream);
// Each row's first maximum.
void argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* out, cudaStream_t stream);

// ---- KV stores and attention (attention.cu) -----------------------------

// One sequence's KV store in a forward: [layers][kv_heads][capacity][head_dim]
// of halves (F16) or floats.
struct SeqKV {
  void* k = nullptr;
  void* v = nullptr;
  int64_t capacity = 0;
  int32_t past = 0;  // entries before this forward
  int32_t row0 = 0;  // its first row in the batch
  int32_t rows = 0;
};
// Row i of the batch attends to the slots [0, prefix) of its sequence, then
// extras[begin, end): its visible list, in this order. `seq` indexes SeqKV.
struct RowVisibility {
  int32_t seq = 0;
  int32_t prefix = 0;
  int32_t begin = 0;
  int32_t end = 0;
};
struct AttentionShape {
  int64_t rows = 0, q_heads = 0, kv_heads = 0, head_dim = 0, layers = 0;
  bool half = true;  // an F16 cache, else F32
};
// Keys attention splits its visible lists into: each span is one warp's,
// and spans merge in order.
constexpr int32_t kAttentionSpan = 128;
// Writes the batch's new k, v ([rows, kv_heads * head_dim]) of `layer` at
// each sequence's positions past, past + 1, ...
void kv_write(const AttentionShape& s, int64_t layer, const SeqKV* seqs, int64_t n_seqs, const int32_t* row_seq,
              const float* k, const float* v, cudaStream_t stream);
// out[rows, q_heads * head_dim] = softmax(q k^T scale) v over each row's
// visible list; `max_len` bounds the lists (for the grid), `partial` is
// scratch of attention_scratch bytes.
size_t attention_scratch(const AttentionShape& s, int32_t max_len);
void attention(const AttentionShape& s, int64_t layer, const SeqKV* seqs, const RowVisibility* rows,
               const int32_t* extras, const float* q, float scale, int32_t max_len, void* partial, float* out,
               cudaStream_t stream);
// Within one store: for every layer and head, entry base + rows[i] moves to
// base + i, in order (rows increasing).
void kv_keep(void* k, void* v, int64_t layers, int64_t kv_heads, int64_t capacity, int64_t head_dim, bool half,
             int64_t base, const int32_t* rows, int64_t count, cudaStream_t stream);
// Copies the first n entries of every head from one store into another of
// another capacity.
void kv_copy(const void* src_k, const void* src_v, int64_t src_capacity, void* dst_k, void* dst_v,
             int64_t dst_capacity, int64_t layers, int64_t kv_heads, int64_t head_dim, bool half, int64_t n,
             cudaStream_t stream);

}  // namespace splitspec::cuda

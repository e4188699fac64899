// Attention over the device KV stores, and the stores' own copies.
//
// A row attends to its visible list (RowVisibility): the slots [0, prefix)
// of its sequence, then its extra slots. The list is cut into spans of
// kAttentionSpan keys by position in the list; a warp takes one span of one
// row and kv head (every query head of the group at once), in chunks of 32
// keys, with a running softmax; a second pass merges each row's spans in
// order. Every step depends on the list alone (its keys and their order),
// not on the batch, so a k-row verification equals k single steps, and a
// tree node, whose list holds the keys its chain would see in the same
// order, equals that chain's node.

#include "common/backend/cuda/device.h"
#include "common/backend/cuda/launch.h"
#include "common/backend/cuda/warp_math.h"

namespace splitspec::cuda {

using namespace blocks;

namespace {

constexpr unsigned kFull = 0xffffffffu;
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <bool kHalf>
__device__ float load_kv(const void* base, int64_t i) {
  if (kHalf) return blocks::half_to_float(static_cast<const uint16_t*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

template <bool kHalf>
__device__ void store_kv(void* base, int64_t i, float v) {
  if (kHalf)
    static_cast<uint16_t*>(base)[i] = blocks::float_to_half(v);
  else
    static_cast<float*>(base)[i] = v;
}

template <bool kHalf>
__global__ void kv_write_kernel(AttentionShape s, int64_t layer, const SeqKV* __restrict__ seqs,
                                const int32_t* __restrict__ row_seq, const float* __restrict__ k,
                                const float* __restrict__ v) {
  const int64_t width = s.kv_heads * s.head_dim;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= s.rows * width) return;
  const int64_t row = i / width, h = (i % width) / s.head_dim, d = i % s.head_dim;
  const SeqKV sq = seqs[row_seq[row]];
  const int64_t pos = sq.past + (row - sq.row0);
  const int64_t at = ((layer * s.kv_heads + h) * sq.capacity + pos) * s.head_dim + d;
  store_kv<kHalf>(sq.k, at, k[i]);
  store_kv<kHalf>(sq.v, at, v[i]);
}

// q . k over d = 0 .. D - 1 in order, one multiply-add each; the key read
// 16 bytes at a time where its row allows (it always starts at a multiple
// of D elements, and rows of halves or floats of a multiple of 8 or 4 are
// 16-byte aligned).
template <bool kHalf>
__device__ float key_dot(const float* q, const void* base, int64_t key, int64_t D) {
  float dot = 0.0f;
  constexpr int kPer = kHalf ? 8 : 4;
  if (D % kPer == 0) {
    const uint4* row = reinterpret_cast<const uint4*>(static_cast<const char*>(base) + key * (kHalf ? 2 : 4));
    for (int64_t v = 0; v < D / kPer; ++v) {
      const uint4 chunk = row[v];
      const uint32_t words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
      for (int i = 0; i < kPer; ++i) {
        float k;
        if (kHalf) {
          k = blocks::half_to_float(static_cast<uint16_t>(words[i / 2] >> (16 * (i % 2))));
        } else {
          k = blocks::bits_float(words[i]);
        }
        dot = fmaf(q[v * kPer + i], k, dot);
      }
    }
    return dot;
  }
  for (int64_t d = 0; d < D; ++d) dot = fmaf(q[d], load_kv<kHalf>(base, key + d), dot);
  return dot;
}

__device__ int32_t slot_of(const RowVisibility& r, const int32_t* extras, int32_t t) {
  return t < r.prefix ? t : extras[r.begin + (t - r.prefix)];
}
__device__ int32_t list_length(const RowVisibility& r) { return r.prefix + (r.end - r.begin); }

// One warp: row blockIdx.x / kv_heads, kv head blockIdx.x % kv_heads, span
// blockIdx.y. Shared: the group's queries [G][D], its sums [G][D], the
// chunk's weights [G][32].
template <bool kHalf>
__global__ void attention_span_kernel(AttentionShape s, int64_t layer, const SeqKV* __restrict__ seqs,
                                      const RowVisibility* __restrict__ rows, const int32_t* __restrict__ extras,
                                      const float* __restrict__ q, float scale, int64_t spans,
                                      float* __restrict__ partial) {
  float* shared = dynamic_shared<float>();
  const int lane = threadIdx.x;
  const int64_t D = s.head_dim, G = s.q_heads / s.kv_heads;
  const int64_t row = blockIdx.x / s.kv_heads, h = blockIdx.x % s.kv_heads, span = blockIdx.y;
  const RowVisibility r = rows[row];
  const int32_t len = list_length(r);
  const int32_t t0 = static_cast<int32_t>(span) * kAttentionSpan;
  if (t0 >= len) return;
  const int32_t t1 = min(len, t0 + kAttentionSpan);
  const SeqKV sq = seqs[r.seq];
  const int64_t head_base = (layer * s.kv_heads + h) * sq.capacity * D;
  float* qs = shared;           // [G][D]
  float* acc = qs + G * D;      // [G][D]
  float* weights = acc + G * D; // [G][32]
  for (int64_t i = lane; i < G * D; i += 32) {
    qs[i] = q[row * s.q_heads * D + h * G * D + i];
    acc[i] = 0.0f;
  }
  __syncwarp();
  float m[16], l[16];  // per query head (G <= 16)
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  for (int32_t c0 = t0; c0 < t1; c0 += 32) {
    const int32_t t = c0 + lane;
    const bool valid = t < t1;
    const int32_t slot = valid ? slot_of(r, extras, t) : 0;
    const int64_t key = head_base + static_cast<int64_t>(slot) * D;
    for (int g = 0; g < G; ++g) {
      float score = -INFINITY;
      if (valid) {
        float dot = 0.0f;
        dot = key_dot<kHalf>(qs + g * D, sq.k, key, D);
        score = dot * scale;
      }
      float cmax = score;
      for (int o = 16; o > 0; o >>= 1) cmax = fmaxf(cmax, __shfl_xor_sync(kFull, cmax, o));
      const float m_new = fmaxf(m[g], cmax);
      const float corr = m[g] == -INFINITY ? 0.0f : expf(m[g] - m_new);
      const float p = valid ? expf(score - m_new) : 0.0f;
      float psum = p;
      for (int o = 16; o > 0; o >>= 1) psum += __shfl_xor_sync(kFull, psum, o);
      l[g] = l[g] * corr + psum;
      m[g] = m_new;
      weights[g * 32 + lane] = p;
      for (int64_t d = lane; d < D; d += 32) acc[g * D + d] = acc[g * D + d] * corr;
    }
    __syncwarp();
    for (int kk = 0; kk < 32; ++kk) {
      const int32_t slot_k = __shfl_sync(kFull, slot, kk);
      if (c0 + kk >= t1) break;
      const int64_t val = head_base + static_cast<int64_t>(slot_k) * D;
      for (int64_t d = lane; d < D; d += 32) {
        const float vd = load_kv<kHalf>(sq.v, val + d);
        for (int g = 0; g < G; ++g) acc[g * D + d] = fmaf(weights[g * 32 + kk], vd, acc[g * D + d]);
      }
    }
    __syncwarp();
  }
  for (int g = 0; g < G; ++g) {
    const int64_t head = h * G + g;
    float* out = partial + ((row * s.q_heads + head) * spans + span) * (2 + D);
    if (lane == 0) {
      out[0] = m[g];
      out[1] = l[g];
    }
    for (int64_t d = lane; d < D; d += 32) out[2 + d] = acc[g * D + d];
  }
}

// Row blockIdx.x / q_heads, head blockIdx.x % q_heads: the spans merged in
// order, every thread running the same scalar steps.
__global__ void attention_merge_kernel(AttentionShape s, const RowVisibility* __restrict__ rows, int64_t spans,
                                       const float* __restrict__ partial, float* __restrict__ out) {
  const int64_t D = s.head_dim;
  const int64_t row = blockIdx.x / s.q_heads, head = blockIdx.x % s.q_heads;
  const int32_t len = list_length(rows[row]);
  const int64_t used = (len + kAttentionSpan - 1) / kAttentionSpan;
  const float* p = partial + (row * s.q_heads + head) * spans * (2 + D);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float m = p[0], l = p[1], a = p[2 + d];
    for (int64_t sp = 1; sp < used; ++sp) {
      const float* q = p + sp * (2 + D);
      const float m_new = fmaxf(m, q[0]);
      const float c_old = expf(m - m_new), c_new = expf(q[0] - m_new);
      l = l * c_old + q[1] * c_new;
      a = a * c_old + q[2 + d] * c_new;
      m = m_new;
    }
    out[row * s.q_heads * D + head * D + d] = a / l;
  }
}

template <bool kHalf>
__global__ void kv_keep_kernel(void* k, void* v, int64_t layers, int64_t kv_heads, int64_t capacity, int64_t head_dim,
                               int64_t base, const int32_t* __restrict__ keep, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= layers * kv_heads * head_dim) return;
  const int64_t lh = i / head_dim, d = i % head_dim;
  const int64_t head = lh * capacity * head_dim;
  // In order: entry base + keep[j] lands at base + j <= it, never on an
  // entry still to be read.
  for (int64_t j = 0; j < count; ++j) {
    const int64_t from = head + (base + keep[j]) * head_dim + d, to = head + (base + j) * head_dim + d;
    if (from == to) continue;
    store_kv<kHalf>(k, to, load_kv<kHalf>(k, from));
    store_kv<kHalf>(v, to, load_kv<kHalf>(v, from));
  }
}

template <bool kHalf>
__global__ void kv_copy_kernel(const void* sk, const void* sv, int64_t src_cap, void* dk, void* dv, int64_t dst_cap,
                               int64_t lh_count, int64_t head_dim, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= lh_count * n * head_dim) return;
  const int64_t lh = i / (n * head_dim), rest = i % (n * head_dim);
  const int64_t from = lh * src_cap * head_dim + rest, to = lh * dst_cap * head_dim + rest;
  store_kv<kHalf>(dk, to, load_kv<kHalf>(sk, from));
  store_kv<kHalf>(dv, to, load_kv<kHalf>(sv, from));
}

size_t span_shared_bytes(const AttentionShape& s) {
  const int64_t G = s.q_heads / s.kv_heads;
  return static_cast<size_t>(2 * G * s.head_dim + G * 32) * sizeof(float);
}

}  // namespace

void kv_write(const AttentionShape& s, int64_t layer, const SeqKV* seqs, int64_t, const int32_t* row_seq,
              const float* k, const float* v, cudaStream_t stream) {
  const int64_t count = s.rows * s.kv_heads * s.head_dim;
  if (count == 0) return;
  if (s.half)
    launch(kv_write_kernel<true>, ceil_div(count, 256), 256, 0, stream, s, layer, seqs, row_seq, k, v);
  else
    launch(kv_write_kernel<false>, ceil_div(count, 256), 256, 0, stream, s, layer, seqs, row_seq, k, v);
  check_launch("kv_write");
}

size_t attention_scratch(const AttentionShape& s, int32_t max_len) {
  const int64_t spans = ceil_div(max_len, kAttentionSpan);
  return static_cast<size_t>(s.rows * s.q_heads * spans * (2 + s.head_dim)) * sizeof(float);
}

void attention(const AttentionShape& s, int64_t layer, const SeqKV* seqs, const RowVisibility* rows,
               const int32_t* extras, const float* q, float scale, int32_t max_len, void* partial, float* out,
               cudaStream_t stream) {
  if (s.rows == 0) return;
  const int64_t spans = ceil_div(max_len, kAttentionSpan);
  const dim3 grid(static_cast<unsigned>(s.rows * s.kv_heads), static_cast<unsigned>(spans));
  const size_t shared = span_shared_bytes(s);
  auto* p = static_cast<float*>(partial);
  if (s.half)
    launch(attention_span_kernel<true>, grid, 32, shared, stream, s, layer, seqs, rows, extras, q, scale, spans, p);
  else
    launch(attention_span_kernel<false>, grid, 32, shared, stream, s, layer, seqs, rows, extras, q, scale, spans, p);
  check_launch("attention (spans)");
  launch(attention_merge_kernel, static_cast<unsigned>(s.rows * s.q_heads), 128, 0, stream, s, rows, spans, p, out);
  check_launch("attention (merge)");
}

void kv_keep(void* k, void* v, int64_t layers, int64_t kv_heads, int64_t capacity, int64_t head_dim, bool half,
             int64_t base, const int32_t* rows, int64_t count, cudaStream_t stream) {
  const int64_t threads = layers * kv_heads * head_dim;
  if (count == 0 || threads == 0) return;
  if (half)
    launch(kv_keep_kernel<true>, ceil_div(threads, 256), 256, 0, stream, k, v, layers, kv_heads, capacity, head_dim, base,
                                                                    rows, count);
  else
    launch(kv_keep_kernel<false>, ceil_div(threads, 256), 256, 0, stream, k, v, layers, kv_heads, capacity, head_dim, base,
                                                                     rows, count);
  check_launch("kv_keep");
}

void kv_copy(const void* src_k, const void* src_v, int64_t src_capacity, void* dst_k, void* dst_v,
             int64_t dst_capacity, int64_t layers, int64_t kv_heads, int64_t head_dim, bool half, int64_t n,
             cudaStream_t stream) {
  const int64_t count = layers * kv_heads * n * head_dim;
  if (count == 0) return;
  if (half)
    launch(kv_copy_kernel<true>, ceil_div(count, 256), 256, 0, stream, src_k, src_v, src_capacity, dst_k, dst_v,
                                                                  dst_capacity, layers * kv_heads, head_dim, n);
  else
    launch(kv_copy_kernel<false>, ceil_div(count, 256), 256, 0, stream, src_k, src_v, src_capacity, dst_k, dst_v,
                                                                   dst_capacity, layers * kv_heads, head_dim, n);
  check_launch("kv_copy");
}

}  // namespace splitspec::cuda

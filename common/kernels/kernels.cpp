// Dispatch, threading and the portable fallback of the kernels. Built with
// -ffp-contract=off: a compiler-fused multiply-add in one loop shape but not
// another would break batch invariance.
#include "common/kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common/kernels/kernels_avx2.h"
#include "common/kernels/kernels_avx512.h"
#include "common/kernels/parallel.h"

namespace splitspec::kernels {

namespace {

// The vector paths of these kernels need AVX2 and FMA (F16C for the
// conversions): whenever linear() runs its avx2 or avx512 body. Elsewhere
// (AArch64) these kernels run their portable loops.
#if defined(__x86_64__)
bool use_avx2() { return isa_in_use() == Isa::kAvx2 || isa_in_use() == Isa::kAvx512; }
#endif

inline float widen(float x) { return x; }
inline float widen(uint16_t h) { return splitspec::half_to_float(h); }

template <class T>
float dot_scalar(const float* a, const T* b, int64_t len) {
  float acc = 0.0f;
  for (int64_t i = 0; i < len; ++i) acc += a[i] * widen(b[i]);
  return acc;
}

template <class T>
void attention_row_scalar(const float* q, const T* k, const T* v, const std::vector<int32_t>& slots, int64_t D,
                          float scale, std::vector<float>& p, float* out) {
  p.resize(slots.size());
  float mx = -std::numeric_limits<float>::infinity();
  for (size_t c = 0; c < slots.size(); ++c) {
    p[c] = dot_scalar(q, k + static_cast<int64_t>(slots[c]) * D, D) * scale;
    mx = std::max(mx, p[c]);
  }
  float total = 0.0f;
  for (auto& x : p) {
    x = std::exp(x - mx);
    total += x;
  }
  std::fill(out, out + D, 0.0f);
  for (size_t c = 0; c < slots.size(); ++c) {
    const T* vs = v + static_cast<int64_t>(slots[c]) * D;
    for (int64_t d = 0; d < D; ++d) out[d] += p[c] * widen(vs[d]);
  }
  const float inv = 1.0f / total;
  for (int64_t d = 0; d < D; ++d) out[d] *= inv;
}

}  // namespace

const char* isa() { return isa_name(isa_in_use()); }

void rms_norm(const float* x, int64_t n, int64_t dim, const float* weight, float eps, float* y) {
  // A row's sum of squares is one chain of additions in index order (its
  // defined sequence); rows go eight at a time, so their chains overlap
  // instead of each waiting out the adder's latency. The float squares are
  // summed in double and the mean rounded to float, as llama.cpp's
  // rms_norm does: a float sum rounds the scale an ulp away, and under
  // K-quants, whose activations are rounded to 8 bits, an ulp can move an
  // input across a rounding boundary and a near-tie's greedy token with it
  // (docs/model-families.md, "Where we and llama.cpp differ").
  constexpr int64_t kRows = 8;
  for (int64_t j0 = 0; j0 < n; j0 += kRows) {
    const int64_t rows = std::min(kRows, n - j0);
    double ss[kRows] = {};
    for (int64_t i = 0; i < dim; ++i)
      for (int64_t j = 0; j < rows; ++j)
        ss[j] += static_cast<double>(x[(j0 + j) * dim + i] * x[(j0 + j) * dim + i]);
    for (int64_t j = j0; j < j0 + rows; ++j) {
      const float* xj = x + j * dim;
      const float mean = static_cast<float>(ss[j - j0] / static_cast<double>(dim));
      const float inv = 1.0f / std::sqrt(mean + eps);
      for (int64_t i = 0; i < dim; ++i) y[j * dim + i] = xj[i] * inv * weight[i];
    }
  }
}

void add_inplace(float* x, const float* d, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] += d[i];
}

void silu(const float* x, int64_t count, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void silu_mul(const float* gate, const float* up, int64_t count, float* y) {
#if defined(__x86_64__)
  const bool avx2 = use_avx2(), avx512 = isa_in_use() == Isa::kAvx512;
#endif
  constexpr int64_t kVector = 8;
  parallel_blocks(count, kVector, 256, [&](int64_t i0, int64_t i1) {
#if defined(__x86_64__)
    if (avx512) {
      avx512::silu_mul(gate + i0, up + i0, i1 - i0, y + i0);
      return;
    }
    if (avx2) {
      avx2::silu_mul(gate + i0, up + i0, i1 - i0, y + i0);
      return;
    }
#endif
    for (int64_t i = i0; i < i1; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  });
}

namespace {

// GELU of every half-precision value, as a half: llama.cpp's table
// (GGML_GELU_FP16), its expression in float (-ffp-contract=off, glibc's
// tanhf).
const std::vector<uint16_t>& gelu_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(1 << 16);
    for (uint32_t h = 0; h < t.size(); ++h) {
      const float x = splitspec::half_to_float(static_cast<uint16_t>(h));
      t[h] = splitspec::float_to_half(0.5f * x * (1.0f + std::tanh(0.7978845608028654f * x * (1.0f + 0.044715f * x * x))));
    }
    return t;
  }();
  return table;
}

}  // namespace

void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* y) {
  const std::vector<uint16_t>& table = gelu_table();
  parallel_blocks(count, 8, 256, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float x = gate[i];
      if (x <= -10.0f)
        y[i] = 0.0f;
      else if (x >= 10.0f)
        y[i] = x * up[i];
      else
        y[i] = splitspec::half_to_float(table[splitspec::float_to_half(x)]) * up[i];
    }
  });
}

void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, int64_t rotary, const float* cos, const float* sin) {
  const int64_t half = rotary / 2;
  for (int64_t r = 0; r < n; ++r) {
    const float* c = cos + r * half;
    const float* s = sin + r * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (r * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

namespace {

template <class T>
void attention_of(const float* q, const T* k, const T* v, const AttentionShape& s,
                  const std::vector<std::vector<int32_t>>& visible, float scale, float* out) {
  const int64_t group = s.q_heads / s.kv_heads;
  const int64_t D = s.head_dim;
  int64_t slots = 0;
  for (const auto& row : visible) slots += static_cast<int64_t>(row.size());
  const int64_t tasks = s.n * s.q_heads;
  if (tasks == 0) return;
  const int64_t min_grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, slots / std::max<int64_t>(1, s.n) * D));
  auto task = [&](int64_t t) {
    const int64_t h = t / s.n, i = t % s.n;
    return AttentionRow<T>{q + (i * s.q_heads + h) * D,
                           k + (h / group) * s.kv_head_stride,
                           v + (h / group) * s.kv_head_stride,
                           visible[i].data(),
                           static_cast<int64_t>(visible[i].size()),
                           out + (i * s.q_heads + h) * D};
  };
#if defined(__x86_64__)
  const bool avx2 = use_avx2(), avx512 = isa_in_use() == Isa::kAvx512;
  if (avx2 && attention_rows_handle(D)) {
    // The slots every row sees first, in the same order.
    int64_t shared = static_cast<int64_t>(visible[0].size());
    for (int64_t i = 1; i < s.n; ++i) {
      const auto first = visible[0].begin();
      shared = std::mismatch(first, first + shared, visible[i].begin(), visible[i].end()).first - first;
    }
    // A head's rows together, so its keys and values are read once for all;
    // with grouped-query attention, the rows of every query head that reads
    // one KV head, where they are few (decoding, verification: a prefill's
    // would multiply the scratch) and the KV heads still go round the threads.
    const int64_t per_call = s.kv_heads >= threads() && s.n * group <= 64 ? group : 1;
    const int64_t calls = s.q_heads / per_call, call_rows = s.n * per_call;
    parallel(calls, grain_for(calls, std::max<int64_t>(1, min_grain / call_rows)), [&](int64_t c0, int64_t c1) {
      std::vector<float> scratch;
      std::vector<float*> scores(static_cast<size_t>(call_rows));
      std::vector<AttentionRow<T>> rows(static_cast<size_t>(call_rows));
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t j = 0; j < call_rows; ++j) rows[j] = task(c * call_rows + j);
        scratch.resize(static_cast<size_t>(attention_scratch(rows.data(), call_rows, D)));
        if (!avx512) {
          avx2::attention_rows(rows.data(), call_rows, shared, D, scale, scratch.data(), scores.data());
          continue;
        }
        // The next call's keys and values come in while this one computes.
        AttentionRow<T> next{};
        if (c + 1 < c1) next = task((c + 1) * call_rows);
        avx512::attention_rows(rows.data(), call_rows, shared, D, scale, scratch.data(), scores.data(),
                               c + 1 < c1 ? &next : nullptr);
      }
    });
    return;
  }
#endif
  // Head-major: a KV head's keys and values stay in the nearest caches
  // while every row of the batch reads them, instead of the whole layer's
  // cache streaming past once per row.
  parallel(tasks, grain_for(tasks, min_grain), [&](int64_t t0, int64_t t1) {
    std::vector<float> scratch;
    for (int64_t t = t0; t < t1; ++t) {
      const AttentionRow<T> r = task(t);
      const std::vector<int32_t>& slots = visible[t % s.n];
#if defined(__x86_64__)
      if (avx2) {
        avx2::attention_row(r.q, r.k, r.v, slots, D, scale, scratch, r.out);
        continue;
      }
#endif
      attention_row_scalar(r.q, r.k, r.v, slots, D, scale, scratch, r.out);
    }
  });
}

}  // namespace

void attention(const float* q, const float* k, const float* v, const AttentionShape& s,
               const std::vector<std::vector<int32_t>>& visible, float scale, float* out) {
  attention_of(q, k, v, s, visible, scale, out);
}

void attention(const float* q, const uint16_t* k, const uint16_t* v, const AttentionShape& s,
               const std::vector<std::vector<int32_t>>& visible, float scale, float* out) {
  attention_of(q, k, v, s, visible, scale, out);
}

float sum_exp(const float* x, int64_t n, float max) {
#if defined(__x86_64__)
  if (use_avx2()) return avx2::sum_exp(x, n, max);
#endif
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - max);
  return s;
}

void half_to_float(const uint16_t* src, int64_t count, float* dst) {
#if defined(__x86_64__)
  if (use_avx2()) {
    avx2::half_to_float(src, count, dst);
    return;
  }
#endif
  for (int64_t i = 0; i < count; ++i) dst[i] = splitspec::half_to_float(src[i]);
}

void float_to_half(const float* src, int64_t count, uint16_t* dst) {
#if defined(__x86_64__)
  if (use_avx2()) {
    avx2::float_to_half(src, count, dst);
    return;
  }
#endif
  for (int64_t i = 0; i < count; ++i) dst[i] = splitspec::float_to_half(src[i]);
}

}  // namespace splitspec::kernels

// Dispatch, threading and the portable fallback of the kernels. Built with
// -ffp-contract=off: a compiler-fused multiply-add in one loop shape but not
// another would break batch invariance.
#include "common/engine/kernels.h"

#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common/engine/kernels_avx2.h"

namespace splitspec::kernels {

namespace {

// SPLITSPEC_KERNELS=scalar forces the portable path, so tests cover it on
// machines that have AVX2.
bool use_avx2() {
  static const bool v = [] {
    const char* force = std::getenv("SPLITSPEC_KERNELS");
    if (force && std::string(force) == "scalar") return false;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return v;
}

bool use_f16c() {
  static const bool v = use_avx2() && __builtin_cpu_supports("f16c");
  return v;
}

// Runs f(begin, end) over [0, count) in chunks of `grain`, handed out
// dynamically so that a core slowed by other work takes fewer chunks instead
// of holding the others at the barrier. Each output element is written by
// exactly one chunk, so results do not depend on how the range was split.
template <typename F>
void parallel(int64_t count, int64_t grain, const F& f) {
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = (count + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(at::get_num_threads(), chunks));
  if (threads <= 1 || omp_in_parallel()) {
    f(0, count);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t c = 0; c < chunks; ++c) f(c * grain, std::min(count, (c + 1) * grain));
}

// Chunk size giving each thread about `per_thread` chunks of at least
// `min_grain` items.
int64_t grain_for(int64_t count, int64_t min_grain, int64_t per_thread = 8) {
  return std::max<int64_t>(min_grain, count / (per_thread * std::max(1, at::get_num_threads())));
}

// parallel() over [0, count) in whole blocks of `block` items (the vector
// width or a kernel's row blocking), at least `min_blocks` blocks per chunk.
template <typename F>
void parallel_blocks(int64_t count, int64_t block, int64_t min_blocks, const F& f) {
  const int64_t blocks = (count + block - 1) / block;
  parallel(blocks, grain_for(blocks, min_blocks),
           [&](int64_t b0, int64_t b1) { f(b0 * block, std::min(count, b1 * block)); });
}

float dot_scalar(const float* a, const float* b, int64_t len) {
  float acc = 0.0f;
  for (int64_t i = 0; i < len; ++i) acc += a[i] * b[i];
  return acc;
}

void attention_row_scalar(const float* q, const float* k, const float* v, const std::vector<int32_t>& slots,
                          int64_t D, float scale, std::vector<float>& p, float* out) {
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
    const float* vs = v + static_cast<int64_t>(slots[c]) * D;
    for (int64_t d = 0; d < D; ++d) out[d] += p[c] * vs[d];
  }
  const float inv = 1.0f / total;
  for (int64_t d = 0; d < D; ++d) out[d] *= inv;
}

}  // namespace

const char* isa() { return use_avx2() ? "avx2+fma" : "scalar"; }

void linear(const float* x, int64_t n, int64_t in, const float* w, int64_t out, float* y) {
  if (n == 0 || out == 0) return;
  // Chunks are ranges of 12 weight rows (a multiple of both row blockings)
  // with enough multiply-adds each to amortise handing them out.
  constexpr int64_t kRowsPerChunk = 12;
  const int64_t min_blocks = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, in * n * kRowsPerChunk));
  const bool avx2 = use_avx2();
  parallel_blocks(out, kRowsPerChunk, min_blocks, [&](int64_t r0, int64_t r1) {
    if (avx2) {
      avx2::linear_rows(x, n, in, w, out, y, r0, r1);
      return;
    }
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < n; ++j) y[j * out + r] = dot_scalar(x + j * in, w + r * in, in);
  });
}

void rms_norm(const float* x, int64_t n, int64_t dim, const float* weight, float eps, float* y) {
  for (int64_t j = 0; j < n; ++j) {
    const float* xj = x + j * dim;
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += xj[i] * xj[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) y[j * dim + i] = xj[i] * inv * weight[i];
  }
}

void silu_mul(const float* gate, const float* up, int64_t count, float* y) {
  const bool avx2 = use_avx2();
  constexpr int64_t kVector = 8;
  parallel_blocks(count, kVector, 256, [&](int64_t i0, int64_t i1) {
    if (avx2) {
      avx2::silu_mul(gate + i0, up + i0, i1 - i0, y + i0);
      return;
    }
    for (int64_t i = i0; i < i1; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  });
}

void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
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

void attention(const float* q, const float* k, const float* v, const AttentionShape& s,
               const std::vector<std::vector<int32_t>>& visible, float scale, float* out) {
  const int64_t group = s.q_heads / s.kv_heads;
  const int64_t D = s.head_dim;
  const bool avx2 = use_avx2();
  int64_t slots = 0;
  for (const auto& row : visible) slots += static_cast<int64_t>(row.size());
  const int64_t tasks = s.n * s.q_heads;
  const int64_t min_grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, slots / std::max<int64_t>(1, s.n) * D));
  parallel(tasks, grain_for(tasks, min_grain), [&](int64_t t0, int64_t t1) {
    std::vector<float> scratch;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / s.q_heads, h = t % s.q_heads;
      const float* qi = q + (i * s.q_heads + h) * D;
      const float* kh = k + (h / group) * s.kv_head_stride;
      const float* vh = v + (h / group) * s.kv_head_stride;
      float* o = out + (i * s.q_heads + h) * D;
      if (avx2)
        avx2::attention_row(qi, kh, vh, visible[i], D, scale, scratch, o);
      else
        attention_row_scalar(qi, kh, vh, visible[i], D, scale, scratch, o);
    }
  });
}

void linear_half_weights(const float* x, int64_t n, int64_t in, const uint16_t* w, int64_t out, float* y) {
  if (n == 0 || out == 0) return;
  const bool f16c = use_f16c();
  constexpr int64_t kRowsPerChunk = 16;
  parallel_blocks(out, kRowsPerChunk, 4, [&](int64_t r0, int64_t r1) {
    if (f16c) {
      avx2::linear_half_rows(x, n, in, w, out, y, r0, r1);
      return;
    }
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t r = r0; r < r1; ++r) {
      half_to_float(w + r * in, in, row.data());
      for (int64_t j = 0; j < n; ++j) y[j * out + r] = dot_scalar(x + j * in, row.data(), in);
    }
  });
}

float sum_exp(const float* x, int64_t n, float max) {
  if (use_avx2()) return avx2::sum_exp(x, n, max);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - max);
  return s;
}

void half_to_float(const uint16_t* src, int64_t count, float* dst) {
  if (use_f16c()) {
    avx2::half_to_float(src, count, dst);
    return;
  }
  for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(c10::Half(src[i], c10::Half::from_bits()));
}

void float_to_half(const float* src, int64_t count, uint16_t* dst) {
  for (int64_t i = 0; i < count; ++i) dst[i] = c10::Half(src[i]).x;
}

void bfloat16_to_float(const uint16_t* src, int64_t count, float* dst) {
  // A bfloat16 is the top half of the float with the same value.
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &bits, sizeof bits);
  }
}

}  // namespace splitspec::kernels

#pragma once
// CPU kernels of the inference forward pass, written to be batch-invariant:
// every output row is produced by the same instruction sequence whatever the
// number of rows in the call, the thread count, or the length of the cache
// beyond what the row may see. So verifying k drafted tokens in one forward
// yields bitwise the logits that k one-token decoding steps would, and greedy
// speculative decoding reproduces the target's own output exactly rather than
// up to float noise that could flip a near-tied argmax.
//
// The matrix products, for every weight type, are in linear.h.
#include <cstdint>
#include <vector>

#include "common/kernels/linear.h"

namespace splitspec::kernels {

// y = x / sqrt(mean(x^2) + eps) * weight, per row of `dim`.
void rms_norm(const float* x, int64_t n, int64_t dim, const float* weight, float eps, float* y);

// x += d, elementwise (the residual connections).
void add_inplace(float* x, const float* d, int64_t count);

// y = silu(x), elementwise (in place allowed).
void silu(const float* x, int64_t count, float* y);

// y = silu(gate) * up, elementwise.
void silu_mul(const float* gate, const float* up, int64_t count, float* y);

// Rotate-half RoPE in place on x[n, heads, head_dim] over each head's first
// `rotary` dims: pairs (i, i + rotary/2) rotate by the angle of row r's
// position (cos/sin rows [n, rotary/2]); dims from `rotary` on pass.
void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, int64_t rotary, const float* cos, const float* sin);

// y = gelu(gate) * up, elementwise, GELU in its tanh form 0.5 x (1 +
// tanh(0.79788456 x (1 + 0.044715 x^2))) as llama.cpp's CPU backend takes it:
// from a table of halves at x rounded to half (0 from -10 down, x from 10
// up). One table for every instruction set and backend, so their bits agree,
// and llama.cpp's on Gemma: in float instead, a near-tie flipped on 1 of 12
// prompts there.
void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* y);

struct AttentionShape {
  int64_t n;               // query rows
  int64_t q_heads;
  int64_t kv_heads;        // q head h reads kv head h / (q_heads / kv_heads)
  int64_t head_dim;        // at most kMaxHeadDim
  int64_t kv_head_stride;  // elements between consecutive kv heads in k and v
};
constexpr int64_t kMaxHeadDim = 512;  // Gemma 4's global layers

// out[n, q_heads * head_dim] = softmax(q k^T * scale) v, where row i attends
// exactly to the cache slots visible[i] (increasing). k and v hold
// [kv_heads][slot][head_dim] with the given head stride.
void attention(const float* q, const float* k, const float* v, const AttentionShape& shape,
               const std::vector<std::vector<int32_t>>& visible, float scale, float* out);
// The same over an F16 cache: k and v hold IEEE half bits, widened exactly.
void attention(const float* q, const uint16_t* k, const uint16_t* v, const AttentionShape& shape,
               const std::vector<std::vector<int32_t>>& visible, float scale, float* out);

// IEEE half to fp32, exactly.
void half_to_float(const uint16_t* src, int64_t count, float* dst);
// fp32 to IEEE half, rounding to nearest even (what a verdict's hidden state
// travels in).
void float_to_half(const float* src, int64_t count, uint16_t* dst);

// sum_i exp(x[i] - max) over x[0, n): a softmax's denominator.
float sum_exp(const float* x, int64_t n, float max);

// Which implementation runs on this CPU (isa_name(isa_in_use())).
const char* isa();

}  // namespace splitspec::kernels

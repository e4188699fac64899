#include "common/model/delta_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/util/error.h"

namespace splitspec {

namespace {

float delta_dot(const float* x, const float* y, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

float delta_silu(float x) { return x / (1.0f + std::exp(-x)); }

// ggml's softplus: x itself past 20, where log(1 + e^x) rounds to it.
float delta_softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// x / sqrt(sum(x^2) + eps), as llama.cpp's build_gdn_l2_norm and Hugging
// Face's l2norm.
void delta_l2_norm(float* x, int64_t n, float eps) {
  const float inv = 1.0f / std::sqrt(delta_dot(x, x, n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace

void delta_rule_rows(const ModelConfig& c, const DeltaRuleWeights& w, int64_t n, const float* qkv, const float* z,
                     const float* b, const float* alpha, const std::vector<int64_t>& before, int64_t past,
                     const std::vector<uint8_t>& save, RecurrentStates& states, int64_t offset, float* out) {
  const int64_t C = c.ssm_channels(), K = c.ssm_conv_kernel, S = c.ssm_head_dim;
  const int64_t Hk = c.ssm_key_heads, Hv = c.ssm_value_heads, Kd = c.ssm_key_dim();
  const int64_t conv_floats = c.ssm_conv_floats(), floats = c.ssm_state_floats();
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(S));
  std::vector<float> work(static_cast<size_t>(floats)), mixed(static_cast<size_t>(C)), d(static_cast<size_t>(S));
  float* const conv_state = work.data();          // [K - 1][C], oldest first
  float* const heads = work.data() + conv_floats;  // [Hv][S (values)][S (keys)]
  int64_t held = -1;  // whose state `work` holds (entries consumed)
  for (int64_t i = 0; i < n; ++i) {
    if (held != before[i]) {
      if (before[i] == 0 && !states.find(0)) {
        std::fill(work.begin(), work.end(), 0.0f);
      } else {
        const float* from = states.find(before[i]);
        if (!from) throw Error("delta rule: the state after " + std::to_string(before[i]) + " entries is not held");
        std::memcpy(work.data(), from + offset, static_cast<size_t>(floats) * sizeof(float));
      }
    }
    // The causal convolution over the kept inputs and this row's, then SiLU.
    const float* x = qkv + i * C;
    for (int64_t ch = 0; ch < C; ++ch) {
      const float* taps = w.conv + ch * K;
      float s = 0.0f;
      for (int64_t j = 0; j + 1 < K; ++j) s += conv_state[j * C + ch] * taps[j];
      s += x[ch] * taps[K - 1];
      mixed[ch] = delta_silu(s);
    }
    if (K > 1) {
      std::memmove(conv_state, conv_state + C, static_cast<size_t>((K - 2) * C) * sizeof(float));
      std::memcpy(conv_state + (K - 2) * C, x, static_cast<size_t>(C) * sizeof(float));
    }
    float* const q = mixed.data();
    float* const k = mixed.data() + Kd;
    const float* const v = mixed.data() + 2 * Kd;
    for (int64_t h = 0; h < Hk; ++h) {
      delta_l2_norm(q + h * S, S, eps);
      delta_l2_norm(k + h * S, S, eps);
      for (int64_t j = 0; j < S; ++j) q[h * S + j] *= scale;
    }
    float* const o = out + i * Hv * S;
    for (int64_t h = 0; h < Hv; ++h) {
      const float* qh = q + (h % Hk) * S;
      const float* kh = k + (h % Hk) * S;
      const float* vh = v + h * S;
      const float beta = 1.0f / (1.0f + std::exp(-b[i * Hv + h]));
      const float decay = std::exp(delta_softplus(alpha[i * Hv + h] + w.dt_bias[h]) * w.a[h]);
      float* const M = heads + h * S * S;  // row j: value j's weights over the keys
      for (int64_t e = 0; e < S * S; ++e) M[e] *= decay;
      for (int64_t j = 0; j < S; ++j) d[j] = (vh[j] - delta_dot(M + j * S, kh, S)) * beta;
      for (int64_t j = 0; j < S; ++j) {
        float* row = M + j * S;
        for (int64_t e = 0; e < S; ++e) row[e] += kh[e] * d[j];
      }
      float* const oh = o + h * S;
      for (int64_t j = 0; j < S; ++j) oh[j] = delta_dot(M + j * S, qh, S);
      // The gated RMSNorm.
      const float inv = 1.0f / std::sqrt(delta_dot(oh, oh, S) / static_cast<float>(S) + eps);
      const float* zh = z + i * Hv * S + h * S;
      for (int64_t j = 0; j < S; ++j) oh[j] = oh[j] * inv * w.norm[j] * delta_silu(zh[j]);
    }
    held = past + i + 1;
    if (save[static_cast<size_t>(i)])
      std::memcpy(states.save(held) + offset, work.data(), static_cast<size_t>(floats) * sizeof(float));
  }
}

}  // namespace splitspec

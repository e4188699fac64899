#pragma once
// A gated delta-rule layer's recurrence (Qwen3.5's linear attention, as
// llama.cpp's src/models/qwen35.cpp and its ggml_gated_delta_net compute it),
// one row at a time in its step form: each row's result depends only on its
// own inputs and the state it starts from, so a k-row verification equals k
// single steps bit for bit, a tree's node its chain's row, and a batch each
// sequence alone.
//
// Per row, after the projections the forward computes for the whole batch:
//   a short causal convolution over the q, k and v channels (the last
//   kernel - 1 inputs kept in the state), SiLU; q and k L2-normed per key
//   head, q scaled by 1 / sqrt(head); per value head h (key head h mod the key
//   heads, llama.cpp's order): beta = sigmoid(b), decay = exp(softplus(a +
//   dt_bias) * A), S = decay * S, d = beta * (v - S k), S += d k^T, o = S q;
//   o RMS-normed per head times silu(z).
#include <cstdint>
#include <vector>

#include "common/model/model_config.h"
#include "common/model/recurrent_states.h"

namespace splitspec {

struct DeltaRuleWeights {
  const float* conv;     // [channels][kernel], oldest input first
  const float* dt_bias;  // [value heads]
  const float* a;        // [value heads]: -exp(A_log)
  const float* norm;     // [head]: the gated norm's gains
};

// One sequence's n new rows through one delta-rule layer. qkv [n, channels],
// z [n, value dim], b and alpha [n, value heads] are the layer's projections
// of the rows. Row i starts from the state after before[i] entries
// (`states` holds it, or an earlier row of this call does; 0: zeros) and
// ends in the state after past + i + 1, which is saved (RecurrentStates::save)
// where save[i]. The layer's part of a state starts `offset` floats in.
// Writes out [n, value dim], ready for the output projection.
void delta_rule_rows(const ModelConfig& c, const DeltaRuleWeights& w, int64_t n, const float* qkv, const float* z,
                     const float* b, const float* alpha, const std::vector<int64_t>& before, int64_t past,
                     const std::vector<uint8_t>& save, RecurrentStates& states, int64_t offset, float* out);

}  // namespace splitspec

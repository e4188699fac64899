#include "common/engine/weight_names.h"

namespace splitspec {

std::string layer_matrix_name(int64_t layer, LayerMatrix m) {
  const char* suffix = "";
  switch (m) {
    case LayerMatrix::kQ: suffix = "self_attn.q_proj.weight"; break;
    case LayerMatrix::kK: suffix = "self_attn.k_proj.weight"; break;
    case LayerMatrix::kV: suffix = "self_attn.v_proj.weight"; break;
    case LayerMatrix::kO: suffix = "self_attn.o_proj.weight"; break;
    case LayerMatrix::kGate: suffix = "mlp.gate_proj.weight"; break;
    case LayerMatrix::kUp: suffix = "mlp.up_proj.weight"; break;
    case LayerMatrix::kDown: suffix = "mlp.down_proj.weight"; break;
  }
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

std::vector<int64_t> layer_matrix_shape(LayerMatrix m, const ModelConfig& c) {
  const int64_t H = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  switch (m) {
    case LayerMatrix::kQ: return {q, H};
    case LayerMatrix::kK:
    case LayerMatrix::kV: return {kv, H};
    case LayerMatrix::kO: return {H, q};
    case LayerMatrix::kGate:
    case LayerMatrix::kUp: return {c.intermediate_size, H};
    case LayerMatrix::kDown: return {H, c.intermediate_size};
  }
  return {};
}

std::string layer_norm_name(int64_t layer, bool post) {
  return "model.layers." + std::to_string(layer) + (post ? ".post_attention_layernorm.weight" : ".input_layernorm.weight");
}

}  // namespace splitspec

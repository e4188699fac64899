#include "common/model/weight_names.h"

#include "common/model/family.h"

namespace splitspec {

std::string layer_matrix_name(int64_t layer, LayerMatrix m) {
  const char* suffix = "";
  switch (m) {
    case LayerMatrix::kQ: suffix = "self_attn.q_proj.weight"; break;
    case LayerMatrix::kK: suffix = "self_attn.k_proj.weight"; break;
    case LayerMatrix::kV: suffix = "self_attn.v_proj.weight"; break;
    case LayerMatrix::kO: suffix = "self_attn.o_proj.weight"; break;
    case LayerMatrix::kSsmQkv: suffix = "linear_attn.in_proj_qkv.weight"; break;
    case LayerMatrix::kSsmZ: suffix = "linear_attn.in_proj_z.weight"; break;
    case LayerMatrix::kSsmBeta: suffix = "linear_attn.in_proj_b.weight"; break;
    case LayerMatrix::kSsmAlpha: suffix = "linear_attn.in_proj_a.weight"; break;
    case LayerMatrix::kSsmOut: suffix = "linear_attn.out_proj.weight"; break;
    case LayerMatrix::kGate: suffix = "mlp.gate_proj.weight"; break;
    case LayerMatrix::kUp: suffix = "mlp.up_proj.weight"; break;
    case LayerMatrix::kDown: suffix = "mlp.down_proj.weight"; break;
    case LayerMatrix::kPleGate: suffix = "per_layer_input_gate.weight"; break;
    case LayerMatrix::kPleProj: suffix = "per_layer_projection.weight"; break;
  }
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

std::vector<int64_t> layer_matrix_shape(LayerMatrix m, const ModelConfig& c, int64_t layer) {
  const int64_t H = c.hidden_size, D = c.layer_head_dim(layer), q = c.num_attention_heads * D,
                kv = c.layer_kv_heads(layer) * D, I = c.layer_intermediate_size(layer), P = c.per_layer_input_size;
  const bool recurrent = c.layer_is_recurrent(layer);
  switch (m) {
    case LayerMatrix::kQ:
      if (recurrent) return {};
      return {c.attn_output_gate ? 2 * q : q, H};
    case LayerMatrix::kK:
      if (!c.layer_has_kv(layer)) return {};
      return {kv, H};
    case LayerMatrix::kV:
      if (!c.layer_has_kv(layer) || c.layer_value_is_key(layer)) return {};
      return {kv, H};
    case LayerMatrix::kO:
      if (recurrent) return {};
      return {H, q};
    case LayerMatrix::kSsmQkv: return recurrent ? std::vector<int64_t>{c.ssm_channels(), H} : std::vector<int64_t>{};
    case LayerMatrix::kSsmZ: return recurrent ? std::vector<int64_t>{c.ssm_value_dim(), H} : std::vector<int64_t>{};
    case LayerMatrix::kSsmBeta:
    case LayerMatrix::kSsmAlpha: return recurrent ? std::vector<int64_t>{c.ssm_value_heads, H} : std::vector<int64_t>{};
    case LayerMatrix::kSsmOut: return recurrent ? std::vector<int64_t>{H, c.ssm_value_dim()} : std::vector<int64_t>{};
    case LayerMatrix::kGate:
    case LayerMatrix::kUp: return {I, H};
    case LayerMatrix::kDown: return {H, I};
    case LayerMatrix::kPleGate: return P > 0 ? std::vector<int64_t>{P, H} : std::vector<int64_t>{};
    case LayerMatrix::kPleProj: return P > 0 ? std::vector<int64_t>{H, P} : std::vector<int64_t>{};
  }
  return {};
}

std::vector<LayerMatrix> layer_matrices(const ModelConfig& c, int64_t layer) {
  std::vector<LayerMatrix> out;
  for (int m = 0; m < kLayerMatrices; ++m)
    if (!layer_matrix_shape(static_cast<LayerMatrix>(m), c, layer).empty()) out.push_back(static_cast<LayerMatrix>(m));
  return out;
}

std::string layer_norm_name(int64_t layer, bool post) {
  return "model.layers." + std::to_string(layer) + (post ? ".post_attention_layernorm.weight" : ".input_layernorm.weight");
}

std::string layer_vector_name(int64_t layer, LayerVector v) {
  const char* suffix = "";
  switch (v) {
    case LayerVector::kQBias: suffix = "self_attn.q_proj.bias"; break;
    case LayerVector::kKBias: suffix = "self_attn.k_proj.bias"; break;
    case LayerVector::kVBias: suffix = "self_attn.v_proj.bias"; break;
    case LayerVector::kQNorm: suffix = "self_attn.q_norm.weight"; break;
    case LayerVector::kKNorm: suffix = "self_attn.k_norm.weight"; break;
    case LayerVector::kPostAttnNorm: suffix = "post_attention_norm.weight"; break;
    case LayerVector::kPostFfnNorm: suffix = "post_feedforward_layernorm.weight"; break;
    case LayerVector::kSsmConv: suffix = "linear_attn.conv1d.weight"; break;
    case LayerVector::kSsmDtBias: suffix = "linear_attn.dt_bias"; break;
    case LayerVector::kSsmA: suffix = "linear_attn.A"; break;
    case LayerVector::kSsmNorm: suffix = "linear_attn.norm.weight"; break;
    case LayerVector::kPleNorm: suffix = "post_per_layer_input_norm.weight"; break;
    case LayerVector::kOutScale: suffix = "layer_scalar"; break;
  }
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::string hf_tensor_name(const std::string& ours, const ModelConfig& c) {
  for (const auto& [mine, theirs] : family_of(c).hf_names)
    if (ends_with(ours, mine)) return ours.substr(0, ours.size() - mine.size()) + theirs;
  return ours;
}

bool hf_gain_less_one(const std::string& ours, const ModelConfig& c) {
  if (!family_of(c).hf_gains_less_one) return false;
  for (const char* norm : {"layernorm.weight", "post_attention_norm.weight", "q_norm.weight", "k_norm.weight"})
    if (ends_with(ours, norm)) return true;
  return ours == kFinalNormName;
}

std::optional<FusedPart> fused_part(int64_t layer, LayerMatrix m, const ModelConfig& c) {
  for (const Fusion& fusion : family_of(c).fusions) {
    int64_t rows = 0, row0 = -1;
    for (LayerMatrix part : fusion.parts) {
      if (part == m) row0 = rows;
      rows += layer_matrix_shape(part, c, layer)[0];
    }
    if (row0 >= 0) return FusedPart{"model.layers." + std::to_string(layer) + "." + fusion.name, rows, row0};
  }
  return std::nullopt;
}

std::map<std::string, FusedPart> fused_parts(const ModelConfig& c) {
  std::map<std::string, FusedPart> fused;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (LayerMatrix m : layer_matrices(c, l))
      if (auto part = fused_part(l, m, c)) fused[layer_matrix_name(l, m)] = *part;
  return fused;
}

int64_t layer_vector_size(LayerVector v, const ModelConfig& c, int64_t layer) {
  const bool recurrent = c.layer_is_recurrent(layer), kv = c.layer_has_kv(layer);
  const int64_t D = c.layer_head_dim(layer);
  switch (v) {
    case LayerVector::kQBias: return c.attention_bias && !recurrent ? c.num_attention_heads * D : 0;
    case LayerVector::kKBias:
    case LayerVector::kVBias: return c.attention_bias && kv ? c.layer_kv_heads(layer) * D : 0;
    case LayerVector::kQNorm: return c.qk_norm && !recurrent ? D : 0;
    case LayerVector::kKNorm: return c.qk_norm && kv ? D : 0;
    case LayerVector::kPostAttnNorm:
    case LayerVector::kPostFfnNorm: return c.post_norms ? c.hidden_size : 0;
    case LayerVector::kSsmConv: return recurrent ? c.ssm_channels() * c.ssm_conv_kernel : 0;
    case LayerVector::kSsmDtBias:
    case LayerVector::kSsmA: return recurrent ? c.ssm_value_heads : 0;
    case LayerVector::kSsmNorm: return recurrent ? c.ssm_head_dim : 0;
    case LayerVector::kPleNorm: return c.per_layer_input_size > 0 ? c.hidden_size : 0;
    case LayerVector::kOutScale: return c.layer_output_scale ? 1 : 0;
  }
  return 0;
}

}  // namespace splitspec

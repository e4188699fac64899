#pragma once
// The names and shapes of a LLaMA model's weights (Hugging Face names).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/model/model_config.h"

namespace splitspec {

// A decoder layer's matrices, in the order its forward uses them.
enum class LayerMatrix { kQ, kK, kV, kO, kGate, kUp, kDown };
constexpr int kLayerMatrices = 7;

// "model.layers.<layer>.self_attn.q_proj.weight", ...
std::string layer_matrix_name(int64_t layer, LayerMatrix m);
// [rows, cols] of a layer matrix.
std::vector<int64_t> layer_matrix_shape(LayerMatrix m, const ModelConfig& c);
// "model.layers.<layer>.input_layernorm.weight" (post: post_attention_layernorm).
std::string layer_norm_name(int64_t layer, bool post);

// A layer's vectors that only some families have: the projections' biases
// (Qwen2) and the per-head query and key norms (Qwen3).
enum class LayerVector { kQBias, kKBias, kVBias, kQNorm, kKNorm };
constexpr int kLayerVectors = 5;
// "model.layers.<layer>.self_attn.q_proj.bias", "....self_attn.q_norm.weight", ...
std::string layer_vector_name(int64_t layer, LayerVector v);
// Its length, or 0 when the family has none.
int64_t layer_vector_size(LayerVector v, const ModelConfig& c);

// Where a family's files hold a layer matrix inside a fused one (Phi-3's
// qkv_proj and gate_up_proj): the fused tensor's name, its rows, and the
// part's first row. Empty for a matrix stored on its own.
struct FusedPart {
  std::string name;
  int64_t fused_rows = 0;
  int64_t row0 = 0;
};
std::optional<FusedPart> fused_part(int64_t layer, LayerMatrix m, const ModelConfig& c);

inline const char* kEmbedName = "model.embed_tokens.weight";
inline const char* kHeadName = "lm_head.weight";
inline const char* kFinalNormName = "model.norm.weight";

}  // namespace splitspec

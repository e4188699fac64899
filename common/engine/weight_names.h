#pragma once
// The names and shapes of a LLaMA model's weights (Hugging Face names).
#include <cstdint>
#include <string>
#include <vector>

#include "common/engine/model_config.h"

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

inline const char* kEmbedName = "model.embed_tokens.weight";
inline const char* kHeadName = "lm_head.weight";
inline const char* kFinalNormName = "model.norm.weight";

}  // namespace splitspec

#pragma once
// The names and shapes of a LLaMA model's weights (Hugging Face names).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/model/model_config.h"

namespace splitspec {

// A decoder layer's matrices, in the order its forward uses them: an
// attention layer's q, k, v and o, or a delta-rule layer's (Qwen3.5's
// linear attention: q, k and v for the convolution, the output gate z, beta,
// alpha, the output), then the MLP's, then the per-layer input's gate and
// projection (Gemma 4).
enum class LayerMatrix {
  kQ, kK, kV, kO, kSsmQkv, kSsmZ, kSsmBeta, kSsmAlpha, kSsmOut, kGate, kUp, kDown, kPleGate, kPleProj
};
constexpr int kLayerMatrices = 14;

// "model.layers.<layer>.self_attn.q_proj.weight", ...
std::string layer_matrix_name(int64_t layer, LayerMatrix m);
// [rows, cols] of layer l's matrix m; empty where the layer has none (an
// attention layer has no delta-rule matrices, and a delta-rule layer no
// attention ones).
std::vector<int64_t> layer_matrix_shape(LayerMatrix m, const ModelConfig& c, int64_t layer);
// The matrices layer l has, in LayerMatrix order.
std::vector<LayerMatrix> layer_matrices(const ModelConfig& c, int64_t layer);
// "model.layers.<layer>.input_layernorm.weight" (post: post_attention_layernorm).
std::string layer_norm_name(int64_t layer, bool post);

// A layer's vectors that only some families have: the projections' biases
// (Qwen2), the per-head query and key norms (Qwen3, Gemma 3), the norms on
// the attention's and the MLP's outputs (Gemma 3), and a delta-rule layer's
// convolution taps ([channels][kernel], oldest input first), dt bias, A (as
// llama.cpp holds it: -exp(A_log)) and the gated norm's gains (Qwen3.5),
// the norm on the per-layer input's projection and the layer's output
// scale (Gemma 4).
enum class LayerVector {
  kQBias, kKBias, kVBias, kQNorm, kKNorm, kPostAttnNorm, kPostFfnNorm, kSsmConv, kSsmDtBias, kSsmA, kSsmNorm,
  kPleNorm, kOutScale
};
constexpr int kLayerVectors = 13;
// "model.layers.<layer>.self_attn.q_proj.bias", "....self_attn.q_norm.weight",
// "....post_attention_norm.weight", "....post_feedforward_layernorm.weight",
// "....linear_attn.conv1d.weight", ....
std::string layer_vector_name(int64_t layer, LayerVector v);
// Layer l's length of it, or 0 when it has none.
int64_t layer_vector_size(LayerVector v, const ModelConfig& c, int64_t layer);

// Where a family's files hold a layer matrix inside a fused one (its
// Family::fusions): the fused tensor's name, its rows, and the part's first
// row. Empty for a matrix stored on its own.
struct FusedPart {
  std::string name;
  int64_t fused_rows = 0;
  int64_t row0 = 0;
};
std::optional<FusedPart> fused_part(int64_t layer, LayerMatrix m, const ModelConfig& c);
// Every fused matrix of the model, by our name.
std::map<std::string, FusedPart> fused_parts(const ModelConfig& c);

// The name a tensor of ours has in the family's Hugging Face files: ours,
// which are Llama's, but where the family renames it (Family::hf_names).
std::string hf_tensor_name(const std::string& ours, const ModelConfig& c);
// Whether the family's Hugging Face files hold this tensor less 1: RMSNorm
// gains of a family whose norm computes x * (1 + w) (Family::hf_gains_less_one).
// Ours (and GGUF files) hold 1 + w.
bool hf_gain_less_one(const std::string& ours, const ModelConfig& c);

inline const char* kEmbedName = "model.embed_tokens.weight";
inline const char* kHeadName = "lm_head.weight";
inline const char* kFinalNormName = "model.norm.weight";
// The per-layer inputs' embedding [vocab, layers x size], the projection of
// the embedding into them [layers x size, hidden], and its norm [size].
inline const char* kPerLayerEmbedName = "model.embed_tokens_per_layer.weight";
inline const char* kPerLayerProjName = "model.per_layer_model_projection.weight";
inline const char* kPerLayerNormName = "model.per_layer_projection_norm.weight";

}  // namespace splitspec

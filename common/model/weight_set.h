#pragma once
// A model's weights as the forward reads them: every matrix at its own
// WType, referenced in place in the mapped file where the stored bytes are
// what the kernels read (F32, F16, BF16: no second copy), and converted or
// packed (Q8_0, Q4_0: weight_type.h) into owned memory otherwise. Free of
// LibTorch.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/kernels/weight_type.h"
#include "common/model/model_config.h"
#include "common/weights/safetensors.h"
#include "common/model/weight_names.h"

namespace splitspec {

// The per-layer inputs' embedding, projection and norm (weight_names.h).
struct PerLayerInputs {
  MatrixRef embed, proj;
  std::vector<float> norm;
};

struct WeightSet {
  std::vector<std::array<MatrixRef, kLayerMatrices>> layers;
  MatrixRef embed;
  MatrixRef lm_head;          // the embedding itself when tied
  std::vector<float> norms;   // [2 * layers + 1][hidden]: input and post norm per layer, then the final one
  // Per layer, the family's extra vectors (weight_names.h), fp32; empty
  // where the family has none.
  std::vector<std::array<std::vector<float>, kLayerVectors>> vectors;
  int64_t hidden = 0;
  PerLayerInputs per_layer;  // empty without (ModelConfig::per_layer_input_size)
  // What the references point into.
  std::shared_ptr<const void> mapping;  // a SafetensorsModel or a GgufFile
  std::vector<WeightBytes> owned;
  bool borrowed = false;  // some matrix points into `mapping`

  const float* input_norm(int64_t l) const { return norms.data() + 2 * l * hidden; }
  const float* post_norm(int64_t l) const { return norms.data() + (2 * l + 1) * hidden; }
  const float* final_norm() const { return norms.data() + (norms.size() - hidden); }
  // Layer l's vector v, or null when the family has none.
  const float* vector(int64_t l, LayerVector v) const {
    const auto& x = vectors[static_cast<size_t>(l)][static_cast<int>(v)];
    return x.empty() ? nullptr : x.data();
  }
  // The layer matrices' type (every layer has the same): its MLP's gate's,
  // which every kind of layer has.
  WType type() const { return layers.empty() ? embed.type : layers[0][static_cast<int>(LayerMatrix::kGate)].type; }
  // Bytes in memory: the matrices at their types (a tied head once) and the
  // norms as fp32.
  uint64_t bytes() const;
  // Bytes of `owned` alone: what was converted rather than mapped.
  uint64_t owned_bytes() const;
  // A 64-bit digest (16 hex digits) of every matrix's type, shape and plain
  // bytes (packed ones unpacked, so every machine gets the same) and every
  // norm and vector: two models with one digest compute the same logits.
  // Not cryptographic: it tells copies apart, it does not resist forgery.
  std::string digest() const;
};

// Where a matrix sits, for the types of a converted model's tensors.
struct TensorSlot {
  enum Kind { kEmbed, kHead, kAttnV, kAttnOut, kFfnDown, kOther } kind = kOther;
  int64_t layer = 0, layers = 1, cols = 0;
  int64_t gqa = 1;  // attention heads per key-value head
};
// The slot of the embedding (the head's, when tied), the head, and layer
// matrix m (a family that fuses q, k and v stores them as one attn_v-like
// tensor, as llama.cpp's quantizer treats attn_qkv).
TensorSlot embed_slot(const ModelConfig& c);
TensorSlot head_slot(const ModelConfig& c);
TensorSlot layer_slot(const ModelConfig& c, int64_t layer, LayerMatrix m);

// The type a tensor takes in a model converted to `model_type`, by
// llama.cpp's rules for its files of that kind (llama_tensor_get_type in its
// src/llama-quant.cpp), "more bits" being the first and last eighth of the
// layers and every third between:
//   q4_0: the LM head (and a tied embedding) at Q8_0: it decides every token.
//   q4_k, q5_k (Q4_K_M, Q5_K_M): the head Q6_K; attn_v and ffn_down Q6_K
//     with more bits; the rest at the model type.
//   q3_k (Q3_K_M): the head Q6_K; attn_v Q5_K in the first two layers, Q4_K
//     after; ffn_down Q5_K in the first sixteenth, Q4_K after; attn_output
//     Q4_K; the rest Q3_K.
//   q2_k (Q2_K): the head Q6_K; attn_v Q4_K with 4 or more heads a
//     key-value head, Q3_K otherwise; ffn_down and attn_output Q3_K; the
//     rest Q2_K.
//   q6_k: every matrix Q6_K.
// Then llama.cpp's fallback (tensor_type_fallback): a super-block type whose
// rows are not whole super-blocks (256) takes Q5_0 for Q4_K, Q5_1 for Q5_K,
// Q8_0 for Q6_K, Q4_0 for Q2_K and Q3_K (the head Q8_0), and F16 where rows
// are not whole 32-blocks either.
WType tensor_type(WType model_type, const TensorSlot& slot);

// The stored type of a safetensors tensor: F32/F16/BF16 by dtype, a block
// type from its metadata (U8 rows). Throws splitspec::Error for anything else,
// and for a quantized tensor whose byte shape does not fit `shape`.
WType stored_wtype(const TensorInfo& t, const std::vector<int64_t>& shape);

// A tensor to take: rows x cols values of some type (norms are 1 x hidden).
using WeightSource = std::function<MatrixRef(const std::string& name, const std::vector<int64_t>& shape)>;

// Where a tensor of ours lies in a model's files as stored, for a reader
// that takes it from disk rather than a mapping (the streamed target).
struct StoredTensor {
  std::string file;
  uint64_t offset = 0, bytes = 0;  // in `file`
  WType type = WType::F32;
  int64_t rows = 1, cols = 0;
  bool gain_less_one = false;  // a Gemma gain as Hugging Face holds it (hf_gain_less_one)
  // llama.cpp's LLaMA query or key rows, interleaved for RoPE in this many
  // heads: put back in Hugging Face's order once read (gguf_model.h).
  int64_t rope_heads = 0;
};
using TensorLocator = std::function<StoredTensor(const std::string& name, const std::vector<int64_t>& shape)>;

// WeightSet::digest() of the set build_weight_set would build from `source`
// at its stored types, without building it (a backend with its own layout
// names the weights it uploads so).
std::string source_digest(const ModelConfig& c, const WeightSource& source);

// Builds the set tensor by tensor from `source`. With `type`, every matrix
// is converted to its type under it (tensor_type); without, each
// keeps its own. `borrow`: a float matrix already of its type is referenced
// where it lies (the source outlives the set, as a mapping does); otherwise
// copied. Quantized matrices come out packed.
// Refuses NaN or infinite values, naming `where` (a file) and the tensor.
// `copied`, when given, is told each tensor the set copied rather than
// borrowed (a mapping then drops its pages).
WeightSet build_weight_set(const ModelConfig& c, const WeightSource& source, std::optional<WType> type, bool borrow,
                           const std::string& where,
                           const std::function<void(const std::string& name)>& copied = nullptr);

// The file's name of our tensor `ours`: the family's (hf_tensor_name), under
// model.language_model. in a multimodal checkpoint.
std::string hf_file_tensor_name(const SafetensorsModel& st, const std::string& ours, const ModelConfig& c);

// The source of a safetensors model (a directory of ours or Hugging Face's):
// tensors by our names, the parts of a family's fused matrices as row
// slices of them, in place.
// Tensors a family's files hold in another form (Family::hf_tensor) are
// converted into `keep` by our name (which the set built from them must
// own, as Model::load's does), or, without it, into the source's own store.
WeightSource safetensors_source(const SafetensorsModel& st, const ModelConfig& c,
                                std::map<std::string, WeightBytes>* keep = nullptr);
// Where each of our tensors lies in a safetensors model, fused parts as row
// slices. Not for a family whose files hold some in another form
// (Family::hf_tensor). `st` must outlive it.
TensorLocator safetensors_locator(const SafetensorsModel& st, const ModelConfig& c);
// A function dropping the pages of the tensor our matrix `name` came from
// (its fused tensor, or its name in the family's files), once the model
// holds a copy of it. `st` must outlive it.
std::function<void(const std::string&)> safetensors_copied_releaser(const SafetensorsModel& st, const ModelConfig& c);

// The weights of the safetensors model in `dir`, mapped.
WeightSet load_weight_set(const std::string& dir, const ModelConfig& c, std::optional<WType> type);

// Writes `w` as DIR/model.safetensors, at `type` if given (converting
// matrices as build_weight_set does). Norms are stored as fp32, as they are
// held: a model converted at load and one loaded from a converted file are
// then the same model.
void save_weight_set(const WeightSet& w, const ModelConfig& c, const std::string& dir, std::optional<WType> type);

// A stored F32/F16/BF16 tensor's values as fp32; throws splitspec::Error on
// other dtypes and on NaN or infinite values.
std::vector<float> load_float_values(const TensorInfo& t);

// The matrix as plain rows of type `to` (converting and unpacking as
// needed). `what` names it in errors.
WeightBytes plain_bytes(const MatrixRef& m, WType to, const std::string& what);

// Bytes of a model's weights as stored, found by `locate` (what an
// in-memory load holds, and what a memory budget's percentage is of).
uint64_t stored_weight_bytes(const TensorLocator& locate, const ModelConfig& c);

}  // namespace splitspec

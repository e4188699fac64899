#pragma once
// A GGUF file as a model of one of our families (model_config.h): its
// metadata as a ModelConfig and its tensors under our names, read in place
// (llama.cpp's names, its fused Phi-3 matrices split by rows, the LLaMA
// query and key rows put back from llama.cpp's interleaved RoPE order).
#include <cstdint>
#include <optional>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/model/model_config.h"
#include "common/weights/gguf.h"
#include "common/model/weight_set.h"

namespace splitspec {

// Throws splitspec::Error naming the file and the key for an unsupported
// architecture or RoPE scaling, and for missing or malformed metadata.
ModelConfig gguf_model_config(const GgufFile& f);

// Tensors by our names. The permuted query and key rows are copied into
// `keep` (by our name), which must outlive the references.
WeightSource gguf_weight_source(const GgufFile& f, const ModelConfig& c, std::map<std::string, WeightBytes>& keep);
// Where each of our tensors lies in the file, for the streamed target. `f`
// must outlive it.
TensorLocator gguf_locator(const GgufFile& f, const ModelConfig& c);
// The tensor `gguf_name` of the file as a matrix of `shape` (ours: rows,
// columns; or a vector's length), in place; throws splitspec::Error naming it
// when it is missing, of another shape, or of a type we do not read.
MatrixRef gguf_tensor_ref(const GgufFile& f, const std::string& gguf_name, const std::vector<int64_t>& shape);

// A function dropping the pages of the tensor our matrix `name` came from,
// once the model holds a copy of it (converted or packed): the file's bytes
// are then not held twice, at load or after. `f` and `c` must outlive it.
std::function<void(const std::string&)> gguf_copied_releaser(const GgufFile& f, const ModelConfig& c);

// llama.cpp's name of our tensor `name` in a model of `c`'s family.
std::string gguf_tensor_name(const std::string& name, const ModelConfig& c);

// The dimensions (ggml order) of our vector `name` of `size` values in a
// GGUF file: {size}, but a delta-rule layer's convolution taps, which
// llama.cpp holds as [kernel, channels].
std::vector<int64_t> gguf_vector_ne(const std::string& name, int64_t size, const ModelConfig& c);

// Row i of llama.cpp's LLaMA query or key matrix is Hugging Face's row
// perm(i): llama.cpp rotates adjacent pairs, Hugging Face halves.
WeightBytes permute_rope_rows(const uint8_t* rows, int64_t count, int64_t head_dim, int64_t row_bytes,
                                       bool to_gguf);

// An unsigned count in the metadata; throws naming the key when it is
// missing (without a fallback) or not a count.
uint32_t gguf_u32(const GgufFile& f, const std::string& key, std::optional<uint32_t> fallback = std::nullopt);
// A count given once or per layer (llama.cpp's get_key_or_arr): `layers`
// values, the fallback's where the key is absent. Throws splitspec::Error
// naming the key for a list of another length or anything not a count.
std::vector<int64_t> gguf_counts(const GgufFile& f, const std::string& key, int64_t layers,
                                 std::optional<uint32_t> fallback = std::nullopt);

}  // namespace splitspec

#pragma once
// LLaMA models between our directories (config.json, model.safetensors,
// tokenizer.model) and GGUF files, so users bring the models they have and
// take ours to llama.cpp. Weights keep their types (F32, F16, BF16, Q8_0,
// Q4_0) unless one is asked for; the query and key rows are permuted between
// Hugging Face's rotate-half RoPE layout and llama.cpp's interleaved one; the
// SentencePiece vocabulary travels as tokenizer.ggml.* (and our
// tokenizer.model file itself, so a round trip is byte-exact).
#include <functional>
#include <optional>
#include <string>

#include "common/kernels/weight_type.h"
#include "common/model/model_config.h"
#include "common/weights/weight_set.h"

namespace splitspec {

class GgufFile;
class GgufWriter;

// Writes the model at `path` (a directory with tokenizer.model, or a GGUF
// file) as the GGUF file `out`. Throws splitspec::Error naming what is
// missing or cannot be written.
void export_gguf(const std::string& path, const std::string& out, std::optional<WType> type);

// Writes a model of any family as a GGUF file llama.cpp loads: its
// architecture's keys and tensor names (Phi-3's matrices fused again, the
// LLaMA query and key rows interleaved), and `tokenizer` adds the
// tokenizer.* metadata.
void write_gguf(const ModelConfig& c, const WeightSet& w, const std::string& name,
                const std::function<void(GgufWriter&)>& tokenizer, const std::string& out, std::optional<WType> type);

// Copies every tokenizer.* key of `from` (a model's or a vocabulary-only
// GGUF such as llama.cpp's ggml-vocab-*.gguf).
void copy_gguf_tokenizer(const GgufFile& from, GgufWriter& g);

// Writes a model directory `out_dir` from the LLaMA GGUF file `gguf`. Throws
// splitspec::Error for another architecture or tokenizer, unsupported
// tensor types (K-quants and others: convert them with llama.cpp to q8_0 or
// q4_0 first), and missing or malformed tensors and metadata.
void import_gguf(const std::string& gguf, const std::string& out_dir, std::optional<WType> type);

}  // namespace splitspec

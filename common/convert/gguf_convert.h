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
#include "common/model/weight_set.h"

namespace splitspec {

class GgufFile;
class GgufWriter;

// Writes the model at `path` (a GGUF file, or a directory with
// tokenizer.gguf, tokenizer.model or tokenizer.json) as the GGUF file `out`,
// its vocabulary with it (a tokenizer.model's chat template from
// tokenizer_config.json too). Throws splitspec::Error naming what is missing
// or cannot be written.
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

// Writes a model directory `out_dir` from the GGUF file `gguf`, its
// vocabulary as write_vocabulary_files does, and checks that the directory's
// tokenizer has the file's fingerprint. Throws splitspec::Error for an
// unsupported architecture, tokenizer or tensor type, and missing or
// malformed tensors and metadata.
void import_gguf(const std::string& gguf, const std::string& out_dir, std::optional<WType> type);

// The vocabulary of the model at `model_path` (a GGUF file or a directory)
// as a vocabulary-only GGUF file `out` (llama.cpp's ggml-vocab-*.gguf form,
// what a server sends a client that has no tokenizer); returns the file's
// fingerprint, for the caller to hold against the model's.
std::string write_vocabulary_gguf(const std::string& model_path, const std::string& out);

// The vocabulary at `from` (a GGUF file, a model directory in any of the
// forms Tokenizer reads, or a tokenizer.model file) as files of `out_dir`:
// a GGUF file's as write_vocabulary_files writes it, a directory's files
// copied as they are. Throws splitspec::Error unless `out_dir` then has
// `from`'s fingerprint.
void copy_vocabulary(const std::string& from, int64_t vocab_size, const std::string& out_dir);

// The GGUF file's vocabulary as files of `out_dir`, each kept whole (the
// ids, the special tokens, the chat template, and so the fingerprint): the
// tokenizer.model it was written from (our conversions carry it), else
// tokenizer.json and tokenizer_config.json where they hold it as it is, else
// tokenizer.gguf, the tokenizer.* metadata alone. Other tokenizer files
// there are removed, as they would be read first.
void write_vocabulary_files(const GgufFile& f, int64_t vocab_size, const std::string& out_dir);

}  // namespace splitspec

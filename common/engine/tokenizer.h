#pragma once
// SentencePiece tokenizer of a model directory (tokenizer.model).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace splitspec {

class SentencePieceBackend;

class Tokenizer {
 public:
  // `path` is a model directory or a tokenizer.model file.
  explicit Tokenizer(const std::string& path);
  ~Tokenizer();

  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  int32_t vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  // FNV-1a 64 digest of the serialized model, in hex: equal fingerprints mean
  // identical vocabularies, for draft/target compatibility checks.
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  std::unique_ptr<SentencePieceBackend> sp_;
  std::string fingerprint_;
};

struct TokenizerTrainOptions {
  std::string corpus;    // plain text, one sentence or paragraph per line
  std::string out_dir;   // receives tokenizer.model
  int32_t vocab_size = 8000;
  // Lines sampled for training; SentencePiece needs far fewer than a corpus has.
  int64_t max_sentences = 2000000;
  int32_t threads = 2;
};

// Trains a SentencePiece BPE model with byte fallback (ids: unk 0, bos 1,
// eos 2, as LLaMA models expect). Throws splitspec::Error on bad input.
void train_tokenizer(const TokenizerTrainOptions& options);

// Emits decoded text incrementally. SentencePiece strips the leading space of
// the first piece and byte-fallback pieces can split a UTF-8 character, so the
// text of a continuation is decoded together with its context and only the
// settled new part is released.
class TextStreamer {
 public:
  TextStreamer(const Tokenizer& tok, std::vector<int32_t> context);
  // Returns the text that became final with `id` (may be empty).
  std::string push(int32_t id);
  // Returns whatever is still held back (trailing incomplete UTF-8).
  std::string finish();
  const std::string& text() const { return emitted_; }

 private:
  const Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t context_chars_ = 0;
  std::string emitted_;
};

}  // namespace splitspec

#pragma once
// The tokenizer of a model: a SentencePiece file (tokenizer.model), a Hugging
// Face tokenizer.json, or a GGUF file's vocabulary, the last two tokenized as
// llama.cpp does (common/tokenizer/vocab.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace splitspec {

class SentencePieceBackend;
class Vocab;

class Tokenizer {
 public:
  // `path` is a model directory (tokenizer.gguf, else tokenizer.model with
  // an optional tokenizer_config.json for its chat template, else
  // tokenizer.json with tokenizer_config.json), a tokenizer.model file or a
  // .gguf file.
  explicit Tokenizer(const std::string& path);
  ~Tokenizer();

  // The text's tokens alone: no BOS, special tokens' texts taken as text.
  std::vector<int32_t> encode(const std::string& text) const;
  // llama_tokenize: BOS/EOS as the vocabulary asks when `add_special`;
  // control tokens' texts become those tokens when `parse_special` (not for
  // a SentencePiece file, whose text is all text), but never within the
  // byte ranges (offset, length) of `literal` (Vocab::tokenize).
  std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool parse_special,
                                const std::vector<std::pair<size_t, size_t>>* literal = nullptr) const;
  // The text of `ids`; control tokens (BOS, EOS, chat markers) give none.
  std::string decode(const std::vector<int32_t>& ids) const;
  // One token's text; `special` renders control tokens.
  std::string token_to_piece(int32_t id, bool special) const;
  int32_t vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  // Whether tokenize(text, true, ...) starts with BOS.
  bool add_bos() const;
  // The tokens that end generation, ascending: EOS, and for vocabularies the
  // end-of-turn tokens llama.cpp recognises (<|eot_id|>, <|im_end|>, ...).
  std::vector<int32_t> eog_ids() const;
  bool is_eog(int32_t id) const;
  // The Jinja chat template the files carry, or empty.
  std::string chat_template() const;
  // "spm-file" (SentencePiece library), "spm" or "bpe" (llama.cpp's).
  const char* kind() const;
  // FNV-1a 64 digest of the serialized model, in hex: equal fingerprints mean
  // identical vocabularies, for draft/target compatibility checks.
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  friend class TextStreamer;
  // decode's text without a vocabulary's clean-up of spaces before
  // punctuation, so that the text of a prefix is a prefix of the text.
  std::string stream_text(const std::vector<int32_t>& ids) const;

  std::unique_ptr<SentencePieceBackend> sp_;  // a SentencePiece file, or
  std::unique_ptr<Vocab> vocab_;              // a vocabulary
  std::string fingerprint_;
  std::string chat_template_;  // a SentencePiece directory's (tokenizer_config.json)
};

// Whether `path` holds a tokenizer Tokenizer(path) opens: a .gguf file, a
// tokenizer.model file, or a directory with tokenizer.gguf, tokenizer.model
// or tokenizer.json.
bool tokenizer_available(const std::string& path);

// The chat template of DIR/tokenizer_config.json, as Hugging Face keeps it
// beside a tokenizer.model ("" without one). Throws splitspec::Error for a
// file that is not JSON.
std::string config_chat_template(const std::string& dir);

// A directory's vocabulary in llama.cpp's own form (a vocabulary-only GGUF
// file, as its models/ggml-vocab-*.gguf): what `convert` writes for a GGUF
// vocabulary that neither tokenizer.json nor tokenizer.model can hold as it
// is (SentencePiece-style ones with their special tokens and chat template).
inline constexpr const char* kVocabFileName = "tokenizer.gguf";

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
// the first piece and byte pieces can split a UTF-8 character, so the text of
// a continuation is decoded together with its context and only the settled
// new part, whole characters, is released.
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

#pragma once
// A llama.cpp-style vocabulary, from a GGUF file (tokenizer.ggml.*) or a
// Hugging Face tokenizer.json, tokenized and detokenized exactly as llama.cpp
// does: SentencePiece-style ("llama": merges by score, byte fallback) and
// byte-level BPE ("gpt2": regex pre-tokenizer, merges by rank). Free of
// LibTorch and of the sentencepiece library.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace splitspec {

class GgufFile;
class GgufWriter;

// The GGUF key holding the SentencePiece model a vocabulary was written from
// (ours: `convert` of a directory with tokenizer.model), so it converts back
// to that file, byte for byte.
inline constexpr const char* kSpmModelKey = "splitspec.tokenizer.sentencepiece_model";

// llama.cpp's token attributes (llama_token_attr), a bit set.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrNormalized = 1u << 6,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
  kAttrSingleWord = 1u << 9,
};

class Vocab {
 public:
  enum class Kind { kSpm, kBpe };

  // Both throw splitspec::Error naming the file and what is wrong with it.
  static Vocab from_gguf(const GgufFile& gguf);
  // `dir` holds tokenizer.json and, optionally, tokenizer_config.json. Ids
  // no token claims, and vocab entries "[PAD<id>]" at their own id (llama.cpp's
  // converter's placeholders), are unused tokens. Added tokens at or past
  // `rows` (default: config.json's vocab_size, when the directory has one),
  // which no forward can take, are dropped, as llama.cpp's converter drops
  // them (Gemma 3's <image_soft_token>).
  static Vocab from_hf_dir(const std::string& dir, std::optional<int64_t> rows = std::nullopt);

  // Adds the vocabulary to `g` as the tokenizer.ggml.* metadata llama.cpp's
  // loader reads: model, pre ("default" for SentencePiece), tokens, scores
  // (SentencePiece, or any not zero), token_type, merges (BPE), the special
  // ids the source named (bos, eos, eot, eom, unknown, padding),
  // add_bos_token, add_eos_token, add_space_prefix (SentencePiece, or when
  // set) and tokenizer.chat_template when there is one. Token types and
  // special ids are written as loaded, before the fix-ups by token text,
  // which from_gguf (like llama.cpp) applies again. general.name, which
  // decides Phi-3's strip attributes, is the caller's to write. GGUF cannot
  // say "no BOS/EOS/UNK": a vocabulary without one reads back with
  // llama.cpp's default id (BPE 11; SentencePiece 1, 2, 0).
  void add_to_gguf(GgufWriter& g) const;
  // Writes a byte-level BPE vocabulary as DIR/tokenizer.json and
  // DIR/tokenizer_config.json, in Hugging Face's layout, for from_hf_dir
  // (and Hugging Face's readers) to read back: every token in model.vocab in
  // id order, control and user-defined ones also in added_tokens ("special"
  // for control), unused "[PAD<id>]" placeholders as vocab entries (which
  // from_hf_dir reads as unused), the pre-tokenizer as a Split of its regex
  // and ByteLevel (llama-bpe, qwen2) or GPT-2's ByteLevel (gpt-2), BOS/EOS
  // as a TemplateProcessing post-processor and in tokenizer_config.json.
  // `dir` is created if missing. Throws splitspec::Error for a SentencePiece
  // vocabulary (written as tokenizer.model instead), for a pre-tokenizer
  // tokenizer.json cannot name, and for texts JSON cannot hold (two tokens of
  // one text, invalid UTF-8).
  void write_hf(const std::string& dir) const;

  Vocab(Vocab&&) noexcept;
  Vocab& operator=(Vocab&&) noexcept;
  ~Vocab();

  Kind kind() const;
  // The pre-tokenizer's name as llama.cpp spells it (tokenizer.ggml.pre);
  // empty for SentencePiece-style vocabularies.
  const std::string& pre() const;
  int32_t size() const;
  const std::string& text(int32_t id) const;
  float score(int32_t id) const;
  uint32_t attr(int32_t id) const;
  // The id of a token's exact text, or -1.
  int32_t find(const std::string& text) const;

  // -1 where the vocabulary has none.
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t eot_id() const;
  int32_t eom_id() const;
  int32_t unk_id() const;
  int32_t pad_id() const;
  bool add_bos() const;
  bool add_eos() const;
  bool add_space_prefix() const;
  // Tokens that end generation, ascending (llama.cpp's special_eog_ids).
  const std::vector<int32_t>& eog_ids() const;
  bool is_eog(int32_t id) const;
  // The Jinja chat template, or empty.
  const std::string& chat_template() const;

  // llama_tokenize: `add_special` adds BOS/EOS as the vocabulary asks;
  // `parse_special` lets control tokens' texts in `text` become those tokens
  // (user-defined tokens always do), except within the byte ranges
  // (offset, length) of `literal`, where no special token is read (a chat
  // message's content: what a user typed stays text).
  std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool parse_special,
                                const std::vector<std::pair<size_t, size_t>>* literal = nullptr) const;
  // llama_token_to_piece: `special` renders control and unknown tokens.
  std::string token_to_piece(int32_t id, bool special) const;
  // llama_detokenize, byte for byte, clean-up of spaces included.
  std::string detokenize(const std::vector<int32_t>& ids, bool remove_special, bool unparse_special) const;
  // The pieces of `ids` joined, without detokenize's clean-up of spaces
  // around punctuation, which can change text already shown: for streaming,
  // where the text of a prefix must be a prefix of the text.
  std::string stream_text(const std::vector<int32_t>& ids) const;

  // FNV-1a 64 in hex over everything that changes tokenization (the BOS id
  // only where it is added); for a vocabulary carrying its SentencePiece
  // model (kSpmModelKey), that model's bytes, as Tokenizer fingerprints the
  // tokenizer.model itself.
  std::string fingerprint() const;

 private:
  struct Impl;
  explicit Vocab(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace splitspec

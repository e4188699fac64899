#pragma once
// Byte-level BPE's pre-tokenizers: the text split into words by llama.cpp's
// regular expressions for each `tokenizer.ggml.pre`, run with PCRE2, and each
// word mapped to GPT-2's byte-level alphabet.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace splitspec {

// Code points of UTF-8 as llama.cpp reads them: a byte that starts no valid
// sequence becomes U+FFFD and the next byte starts afresh.
std::vector<uint32_t> utf8_code_points(const std::string& text);
// UTF-8 of one code point, as llama.cpp writes it (no check for surrogates).
void append_utf8(std::string& out, uint32_t cp);
// GPT-2's byte-level alphabet: byte -> the UTF-8 of its stand-in code point,
// and that code point -> the byte (-1 for any other code point).
const std::string& byte_to_unicode(uint8_t byte);
int unicode_to_byte(uint32_t cp);

// A pre-tokenizer: its regular expressions, run in order (each splits the
// words the one before left), under every name a file may give it
// (tokenizer.ggml.pre).
struct PreTokenizerPattern {
  std::string regex;
  // How the stretches of text between two matches become words. llama.cpp
  // runs GPT-2's, Llama 3's and Qwen2's patterns through hand-written
  // matchers that emit each unmatched code point alone; every other pattern
  // through std::regex, which leaves a stretch whole.
  enum class Gaps { kPerCodePoint, kWhole } gaps = Gaps::kWhole;
};
struct PreTokenizerDef {
  std::vector<std::string> names;
  std::vector<PreTokenizerPattern> patterns;
  // Words in GPT-2's byte-level alphabet, or as the text's own UTF-8 (Gemma's
  // SentencePiece-style BPE, whose spaces are already U+2581).
  bool byte_encode = true;
};
// llama.cpp's pre-tokenizers are built in; a model family adds its own here
// (common/model/family.h). Throws splitspec::Error for a name already taken
// or a pattern PCRE2 does not compile.
void register_pre_tokenizer(PreTokenizerDef def);

// The pre-tokenizer names understood, comma-separated, for error messages.
std::string supported_pre_tokenizers();
// Whether `pre` names a supported pre-tokenizer.
bool is_supported_pre_tokenizer(const std::string& pre);

class PreTokenizer {
 public:
  // Throws splitspec::Error for a name is_supported_pre_tokenizer rejects.
  explicit PreTokenizer(const std::string& pre);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;
  // The words of `text`, byte-level encoded (but for byte_level() false:
  // Gemma's, as UTF-8).
  std::vector<std::string> split(const std::string& text) const;
  bool byte_level() const { return byte_encode_; }

 private:
  struct Pattern;
  std::vector<std::unique_ptr<Pattern>> patterns_;
  bool byte_encode_ = true;
};

}  // namespace splitspec

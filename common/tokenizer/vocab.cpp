#include "common/tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <sstream>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "common/tokenizer/pre_tokenizer.h"
#include "common/util/error.h"
#include "common/util/fnv1a.h"
#include "common/weights/gguf.h"

namespace fs = std::filesystem;

namespace splitspec {

namespace {

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's stand-in for a space

// Tokens that llama.cpp makes end generation, found by their text.
const char* const kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>",   "<|end|>",        "<|return|>",       "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",   "_<EOT>",  "[EOT]",     "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", "[e~["};
// The texts llama.cpp takes for an end-of-turn token when the file names none.
const char* const kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
    "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", "<end_of_utterance>"};
// Fill-in-the-middle pad, repository and file separators: also end generation.
const char* const kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const char* const kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const char* const kFimSepTexts[] = {"<|file_sep|>"};
// Other fill-in-the-middle tokens, which llama.cpp marks as control tokens.
const char* const kFimOtherTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"};

// The C locale's isspace, which llama.cpp's lstrip/rstrip use.
bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

size_t utf8_len(char lead) {
  static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[static_cast<uint8_t>(lead) >> 4];
}

// A text's characters as a linked list, the merge loops' starting symbols.
struct Symbol {
  int prev, next;
  size_t offset, n;
};

std::vector<Symbol> utf8_symbols(const std::string& text) {
  std::vector<Symbol> symbols;
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(utf8_len(text[off]), text.size() - off);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, off + n == text.size() ? -1 : index + 1, off, n});
    off += n;
  }
  return symbols;
}

std::string merge_key(const std::string& a, const std::string& b) {
  std::string k;
  k.reserve(a.size() + b.size() + 1);
  k += a;
  k += '\0';
  k += b;
  return k;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// llama.cpp's pre-tokenizer settings that are not the regular expressions.
struct PreFlags {
  bool clean_spaces = true;
  bool ignore_merges = false;
  bool add_bos = false;
};

PreFlags pre_flags(const std::string& pre) {
  PreFlags f;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    f.ignore_merges = true;
    f.add_bos = true;
  }
  if (pre == "qwen2" || pre == "qwen35" || pre == "deepseek-r1-qwen" || pre == "smollm" || pre == "command-r")
    f.clean_spaces = false;
  return f;
}

// A stretch of text or a token found in it by its text.
struct Fragment {
  int32_t token = -1;  // -1: text
  size_t offset = 0;
  size_t length = 0;
};

}  // namespace

struct Vocab::Impl {
  std::string source;  // the file, for messages
  Kind kind = Kind::kSpm;
  std::string pre;
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<uint32_t> attrs;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::unordered_map<std::string, int32_t> ids;
  std::unordered_map<std::string, int32_t> ranks;  // merge_key(a, b) -> rank
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  int32_t mask = -1;  // kept for the files we write (llama.cpp's BERT-style mask; Gemma's files name one)
  // A vocabulary written from a SentencePiece model carries the model's
  // bytes (gguf_convert.h): its fingerprint is theirs, as the model's own
  // directory has it, so a draft pairs with the model in either form.
  std::string spm_fingerprint;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  bool clean_spaces = false, ignore_merges = false;
  // SentencePiece-style BPE (Gemma's; llama.cpp's "gemma4" model): spaces
  // become U+2581 and the merges run on the text's own UTF-8, with byte
  // fallback to <0xXX> tokens.
  bool spm_style() const { return kind == Kind::kBpe && pre == "gemma4"; }
  std::vector<int32_t> eog;
  std::vector<int32_t> specials;  // partitioned out of text, longest first
  std::string chat_template;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  // The types and special ids as loaded, before finish()'s fix-ups by token
  // text: what add_to_gguf writes, for from_gguf to redo the same fix-ups.
  std::vector<uint32_t> loaded_attrs;
  int32_t loaded_bos = -1, loaded_eos = -1, loaded_eot = -1, loaded_eom = -1, loaded_unk = -1, loaded_pad = -1;

  int32_t find(const std::string& t) const {
    auto it = ids.find(t);
    return it == ids.end() ? -1 : it->second;
  }
  int32_t rank(const std::string& a, const std::string& b) const {
    auto it = ranks.find(merge_key(a, b));
    return it == ranks.end() ? -1 : it->second;
  }
  void check_id(int32_t id) const {
    if (id < 0 || id >= static_cast<int32_t>(texts.size()))
      throw Error("tokenizer: token id " + std::to_string(id) + " outside the vocabulary of " +
                  std::to_string(texts.size()));
  }

  // Everything derived from the loaded texts, types and special ids, with
  // llama.cpp's text-based fix-ups of the types. `model_name` is
  // general.name, which decides phi-3's strip attributes.
  void finish(const std::string& model_name);
  std::vector<Fragment> partition(const std::string& text, bool parse_special,
                                  const std::vector<std::pair<size_t, size_t>>* literal) const;
  void tokenize_spm(const std::string& text, std::vector<int32_t>& out) const;
  void tokenize_bpe(const std::string& text, std::vector<int32_t>& out) const;
  int32_t spm_byte_token(uint8_t byte) const;
  std::string piece(int32_t id, bool special) const;
  std::string detokenize(const std::vector<int32_t>& ids, bool remove_special, bool unparse_special, bool clean) const;
};

void Vocab::Impl::finish(const std::string& model_name) {
  const int32_t n = static_cast<int32_t>(texts.size());
  loaded_attrs = attrs;
  loaded_bos = bos, loaded_eos = eos, loaded_eot = eot, loaded_eom = eom, loaded_unk = unk, loaded_pad = pad;
  ids.clear();
  ids.reserve(texts.size() * 2);
  for (int32_t i = 0; i < n; ++i) {
    // llama.cpp renames empty texts so that every token has its own.
    if (texts[i].empty()) texts[i] = "[EMPTY_" + std::to_string(i) + "]";
    ids[texts[i]] = i;
  }
  ranks.clear();
  ranks.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r) ranks.emplace(merge_key(merges[r].first, merges[r].second), static_cast<int32_t>(r));

  auto make_control = [&](int32_t id) { attrs[id] |= kAttrControl; };
  auto find_any = [&](const auto& list) {
    // The lowest id among the candidates, where llama.cpp takes whichever its
    // hash map yields first.
    int32_t best = -1;
    for (const char* t : list) {
      const int32_t id = find(t);
      if (id >= 0 && (best < 0 || id < best)) best = id;
    }
    return best;
  };
  // Found by text, they become control tokens; named by the file, they stay
  // as the file says.
  if (eot < 0 && (eot = find_any(kEotTexts)) >= 0) make_control(eot);
  if (eom < 0 && (eom = find("<|eom_id|>")) >= 0) make_control(eom);
  for (const char* t : kFimOtherTexts)
    if (int32_t id = find(t); id >= 0) make_control(id);
  std::vector<int32_t> eog_set;
  for (const auto* list : {&kFimPadTexts, &kFimRepTexts}) {
    const int32_t id = find_any(*list);
    if (id >= 0) {
      make_control(id);
      eog_set.push_back(id);
    }
  }
  if (const int32_t id = find_any(kFimSepTexts); id >= 0) {
    make_control(id);
    eog_set.push_back(id);
  }
  // Control tokens named "unused" are placeholders.
  for (int32_t i = 0; i < n; ++i)
    if ((attrs[i] & kAttrControl) && texts[i].find("unused") != std::string::npos) attrs[i] |= kAttrUnused;
  for (const char* t : kEogTexts)
    if (int32_t id = find(t); id >= 0) {
      make_control(id);
      eog_set.push_back(id);
    }
  // gpt-oss's structural tokens are always rendered.
  for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (int32_t id = find(t); id >= 0) attrs[id] = kAttrUserDefined;
  for (int32_t id : {eos, eot, eom})
    if (id >= 0) eog_set.push_back(id);
  std::sort(eog_set.begin(), eog_set.end());
  eog_set.erase(std::unique(eog_set.begin(), eog_set.end()), eog_set.end());
  // Harmony-style vocabularies end a message with <|end|> but not the turn.
  auto has = [&](const char* t) {
    const int32_t id = find(t);
    return id >= 0 && std::binary_search(eog_set.begin(), eog_set.end(), id);
  };
  if (has("<|end|>") && ((has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>")))) {
    const int32_t end = find("<|end|>");
    eog_set.erase(std::find(eog_set.begin(), eog_set.end(), end));
    attrs[end] = kAttrUserDefined;
  }
  eog = std::move(eog_set);

  specials.clear();
  for (int32_t i = 0; i < n; ++i)
    if (attrs[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) specials.push_back(i);
  // Longest first, so that a token is not found inside a longer one; ties by
  // id, where llama.cpp leaves the order to std::sort.
  std::stable_sort(specials.begin(), specials.end(),
                   [&](int32_t a, int32_t b) { return texts[a].size() > texts[b].size(); });

  std::string name = model_name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    // Phi-3's chat tokens swallow the whitespace after them.
    for (int32_t id : specials) attrs[id] |= kAttrRstrip;
    if (int32_t id = find("</s>"); id >= 0) attrs[id] |= kAttrRstrip;
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"})
      if (int32_t id = find(t); id >= 0) attrs[id] &= ~kAttrRstrip;
  }

  if (kind == Kind::kBpe) pre_tokenizer = std::make_unique<PreTokenizer>(pre);
}

std::vector<Fragment> Vocab::Impl::partition(const std::string& text, bool parse_special,
                                             const std::vector<std::pair<size_t, size_t>>* literal) const {
  // Whether [at, at + n) touches a literal range.
  auto in_literal = [literal](size_t at, size_t n) {
    if (!literal) return false;
    for (const auto& [o, l] : *literal)
      if (at < o + l && o < at + n) return true;
    return false;
  };
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  for (int32_t special : specials) {
    const uint32_t a = attrs[special];
    if (!parse_special && (a & (kAttrControl | kAttrUnknown))) continue;
    const std::string& needle = texts[special];
    std::vector<Fragment> next;
    next.reserve(frags.size());
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t off = f.offset, len = f.length;
      while (len > 0) {
        size_t hit = std::string_view(text.data(), off + len).find(needle, off);
        while (hit != std::string::npos && in_literal(hit, needle.size()))
          hit = std::string_view(text.data(), off + len).find(needle, hit + 1);
        if (hit == std::string::npos) {
          next.push_back({-1, off, len});
          break;
        }
        size_t left = hit - off;
        if (a & kAttrLstrip)
          while (left > 0 && is_ascii_space(text[off + left - 1])) --left;
        if (left > 0) next.push_back({-1, off, left});
        next.push_back({special, 0, 0});
        size_t right_off = hit + needle.size();
        size_t right_len = off + len - right_off;
        if (a & kAttrRstrip)
          while (right_len > 0 && is_ascii_space(text[right_off])) ++right_off, --right_len;
        off = right_off;
        len = right_len;
      }
    }
    frags = std::move(next);
  }
  return frags;
}

int32_t Vocab::Impl::spm_byte_token(uint8_t byte) const {
  char hex[7];
  std::snprintf(hex, sizeof hex, "<0x%02X>", byte);
  if (int32_t id = find(hex); id >= 0) return id;
  if (int32_t id = find(std::string(1, static_cast<char>(byte))); id >= 0) return id;
  throw Error(source + ": the vocabulary has no token for byte " + hex + " (byte fallback)");
}

void Vocab::Impl::tokenize_spm(const std::string& text, std::vector<int32_t>& out) const {
  // Symbols are UTF-8 characters, linked so that merging unlinks the right one.
  struct Bigram {
    int left, right;
    float score;
    size_t size;
  };
  // Highest score first; the leftmost among equals.
  auto worse = [](const Bigram& l, const Bigram& r) { return l.score < r.score || (l.score == r.score && l.left > r.left); };
  std::vector<Symbol> symbols = utf8_symbols(text);
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  // Where each merged text came from, to split pieces the vocabulary lacks.
  std::unordered_map<std::string, std::pair<int, int>> sources;
  auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    std::string s = text.substr(symbols[left].offset, symbols[left].n + symbols[right].n);
    const int32_t id = find(s);
    if (id < 0) return;
    queue.push({left, right, scores[id], s.size()});
    sources[std::move(s)] = {left, right};
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_pair(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // Stale: one side has been merged into something else since.
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_pair(l.prev, b.left);
    try_pair(b.left, l.next);
  }
  std::function<void(const Symbol&)> emit = [&](const Symbol& s) {
    const std::string piece = text.substr(s.offset, s.n);
    if (const int32_t id = find(piece); id >= 0) {
      out.push_back(id);
      return;
    }
    auto it = sources.find(piece);
    if (it == sources.end()) {
      for (size_t j = 0; j < s.n; ++j) out.push_back(spm_byte_token(static_cast<uint8_t>(text[s.offset + j])));
      return;
    }
    emit(symbols[it->second.first]);
    emit(symbols[it->second.second]);
  };
  if (symbols.empty()) return;
  for (int i = 0; i != -1; i = symbols[i].next) emit(symbols[i]);
}

void Vocab::Impl::tokenize_bpe(const std::string& text, std::vector<int32_t>& out) const {
  struct Bigram {
    int left, right;
    int32_t rank;
    std::string text;
  };
  // Lowest rank first; the leftmost among equals.
  auto worse = [](const Bigram& l, const Bigram& r) { return l.rank > r.rank || (l.rank == r.rank && l.left > r.left); };
  for (const std::string& word : pre_tokenizer->split(text)) {
    if (ignore_merges) {
      if (const int32_t id = find(word); id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    // llama.cpp's fix for Gemma: a run of newlines that is a token is taken whole.
    if (spm_style() && word.find_first_not_of('\n') == std::string::npos)
      if (const int32_t id = find(word); id >= 0) {
        out.push_back(id);
        continue;
      }
    std::vector<Symbol> symbols = utf8_symbols(word);
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    auto try_pair = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const int32_t r = rank(word.substr(symbols[left].offset, symbols[left].n),
                             word.substr(symbols[right].offset, symbols[right].n));
      if (r < 0) return;
      queue.push({left, right, r, word.substr(symbols[left].offset, symbols[left].n + symbols[right].n)});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_pair(i - 1, i);
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& l = symbols[b.left];
      Symbol& r = symbols[b.right];
      // Stale: either side changed since the pair was queued.
      if (l.n == 0 || r.n == 0 || l.n + r.n != b.text.size() || word.compare(l.offset, l.n + r.n, b.text) != 0) continue;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) symbols[r.next].prev = b.left;
      try_pair(l.prev, b.left);
      try_pair(b.left, l.next);
    }
    for (const Symbol& s : symbols) {
      if (s.n == 0) continue;
      const std::string piece = word.substr(s.offset, s.n);
      if (const int32_t id = find(piece); id >= 0) {
        out.push_back(id);
        continue;
      }
      // As llama.cpp: each byte of the encoded piece that is a token by
      // itself (Gemma's: its <0xXX> token), the others dropped.
      for (char c : piece) {
        char hex[7];
        std::snprintf(hex, sizeof hex, "<0x%02X>", static_cast<unsigned char>(c));
        if (const int32_t id = find(spm_style() ? std::string(hex) : std::string(1, c)); id >= 0) out.push_back(id);
      }
    }
  }
}

std::string Vocab::Impl::piece(int32_t id, bool special) const {
  check_id(id);
  const uint32_t a = attrs[id];
  if (!special && (a & (kAttrUnknown | kAttrControl))) return {};
  const std::string& t = texts[id];
  if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return t;
  if (a & kAttrNormal) {
    if (kind == Kind::kSpm || spm_style()) {
      std::string s = t;
      replace_all(s, kSpace, " ");
      return s;
    }
    std::string s;
    for (uint32_t cp : utf8_code_points(t)) {
      const int byte = unicode_to_byte(cp);
      if (byte >= 0) {
        s += static_cast<char>(byte);
        continue;
      }
      // What llama.cpp writes for a code point outside the byte alphabet.
      std::string utf8;
      append_utf8(utf8, cp);
      s += "[UNK_BYTE_0x";
      for (unsigned char c : utf8) {
        char hex[3];
        std::snprintf(hex, sizeof hex, "%02x", c);
        s += hex;
      }
      s += t + "]";
    }
    return s;
  }
  if (a & kAttrByte) return std::string(1, static_cast<char>(std::strtol(t.substr(3, 2).c_str(), nullptr, 16)));
  return {};
}

std::string Vocab::Impl::detokenize(const std::vector<int32_t>& in, bool remove_special, bool unparse_special,
                                    bool clean) const {
  size_t begin = 0, end = in.size();
  bool remove_space = add_space_prefix;
  if (remove_special && add_bos && end > begin && in[begin] == bos) {
    remove_space = false;
    ++begin;
  }
  if (remove_special && add_eos && end > begin && in[end - 1] == eos) --end;
  std::string text;
  for (size_t i = begin; i < end; ++i) {
    std::string p = piece(in[i], unparse_special);
    if (remove_space && !p.empty() && p[0] == ' ') p.erase(0, 1);
    remove_space = false;
    text += p;
  }
  if (!clean || !clean_spaces || text.empty()) return text;

  // llama.cpp's clean_up_tokenization_spaces, pass for pass. Each pass keeps
  // the first byte and looks at the bytes before and after in its input.
  std::string a = std::move(text), b;
  b.reserve(a.size());
  // " ?", " !", " .", " ," lose their space.
  b += a[0];
  for (size_t i = 1; i < a.size(); ++i) {
    const char x = a[i];
    if (a[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) b.pop_back();
    b += x;
  }
  // " ' " becomes "'".
  a.swap(b);
  b.clear();
  b += a[0];
  for (size_t i = 1; i < a.size(); ++i) {
    const char x = a[i];
    if (x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      a[++i] = '\0';
    }
    b += x;
  }
  // " 's", " 'm", " 're", " 've" lose their space.
  a.swap(b);
  b.clear();
  b += a[0];
  for (size_t i = 1; i < a.size(); ++i) {
    const char x = a[i];
    if (a[i - 1] == ' ' && x == '\'' && i + 1 < a.size()) {
      const char x1 = a[i + 1];
      if (x1 == 's' || x1 == 'm') {
        b.pop_back();
      } else if (x1 != 't' && x1 != 'd' && i + 2 < a.size()) {
        const char x2 = a[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) b.pop_back();
      }
    }
    b += x;
  }
  return b;
}

Vocab::Vocab(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Vocab::Vocab(Vocab&&) noexcept = default;
Vocab& Vocab::operator=(Vocab&&) noexcept = default;
Vocab::~Vocab() = default;

Vocab Vocab::from_gguf(const GgufFile& gguf) {
  auto v = std::make_unique<Impl>();
  const std::string& path = gguf.path();
  v->source = path;
  auto fail = [&](const std::string& what) { throw Error(path + ": " + what); };
  const auto& md = gguf.metadata();
  auto str = [&](const char* key) -> std::string {
    auto it = md.find(key);
    if (it == md.end()) return {};
    if (it->second.type != GgufType::kString) fail(std::string(key) + " is not a string");
    return it->second.str;
  };
  auto flag = [&](const char* key, bool& out) {
    auto it = md.find(key);
    if (it != md.end()) out = it->second.num != 0;
  };

  const std::string model = str("tokenizer.ggml.model");
  if (model.empty()) fail("GGUF metadata 'tokenizer.ggml.model' is missing: the file carries no vocabulary");
  if (model == "llama") {
    v->kind = Kind::kSpm;
    v->bos = 1;
    v->eos = 2;
    v->unk = 0;
    v->add_space_prefix = true;
    v->add_bos = true;
  } else if (model == "gemma4") {
    // llama.cpp's SentencePiece-style BPE: its pre-tokenizer whatever the
    // file says, and BOS always added.
    v->kind = Kind::kBpe;
    v->pre = "gemma4";
    v->clean_spaces = pre_flags(v->pre).clean_spaces;
  } else if (model == "gpt2") {
    v->kind = Kind::kBpe;
    v->bos = 11;
    v->eos = 11;
    v->pre = str("tokenizer.ggml.pre");
    // llama.cpp falls back to its default expressions when a file names none.
    if (v->pre.empty()) v->pre = "default";
    if (!is_supported_pre_tokenizer(v->pre))
      fail("unknown pre-tokenizer tokenizer.ggml.pre = '" + v->pre + "'; supported: " + supported_pre_tokenizers());
    const PreFlags f = pre_flags(v->pre);
    v->clean_spaces = f.clean_spaces;
    v->ignore_merges = f.ignore_merges;
    v->add_bos = f.add_bos;
  } else {
    fail("unknown tokenizer model tokenizer.ggml.model = '" + model +
         "'; supported: llama (SentencePiece), gpt2 (byte-level BPE), gemma4 (SentencePiece-style BPE)");
  }

  const GgufValue& tokens = gguf.get("tokenizer.ggml.tokens");
  if (tokens.type != GgufType::kArray || tokens.elem != GgufType::kString)
    fail("tokenizer.ggml.tokens is not an array of strings");
  v->texts = tokens.strs;
  const size_t n = v->texts.size();
  if (n == 0) fail("tokenizer.ggml.tokens is empty");
  v->scores.assign(n, 0.0f);
  if (auto it = md.find("tokenizer.ggml.scores"); it != md.end()) {
    if (it->second.type != GgufType::kArray || it->second.nums.size() != n)
      fail("tokenizer.ggml.scores has " + std::to_string(it->second.nums.size()) + " values for " + std::to_string(n) +
           " tokens");
    for (size_t i = 0; i < n; ++i) v->scores[i] = static_cast<float>(it->second.nums[i]);
  }
  v->attrs.assign(n, kAttrNormal);
  if (auto it = md.find("tokenizer.ggml.token_type"); it != md.end()) {
    if (it->second.type != GgufType::kArray || it->second.nums.size() != n)
      fail("tokenizer.ggml.token_type has " + std::to_string(it->second.nums.size()) + " values for " +
           std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) {
      // llama_token_type: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
      static const uint32_t by_type[] = {kAttrUndefined, kAttrNormal, kAttrUnknown, kAttrControl,
                                         kAttrUserDefined, kAttrUnused, kAttrByte};
      const double t = it->second.nums[i];
      v->attrs[i] = t >= 0 && t <= 6 ? by_type[static_cast<int>(t)] : kAttrUndefined;
    }
  }
  if (v->kind == Kind::kBpe) {
    const GgufValue& merges = gguf.get("tokenizer.ggml.merges");
    if (merges.type != GgufType::kArray || merges.elem != GgufType::kString)
      fail("tokenizer.ggml.merges is not an array of strings");
    v->merges.reserve(merges.strs.size());
    for (const std::string& m : merges.strs) {
      // Split at the first space after the first byte, as llama.cpp does: a
      // merge's left side may itself be a space.
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) v->merges.emplace_back();
      else v->merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
  }

  const std::pair<const char*, int32_t*> special_keys[] = {
      {"tokenizer.ggml.bos_token_id", &v->bos},     {"tokenizer.ggml.eos_token_id", &v->eos},
      {"tokenizer.ggml.eot_token_id", &v->eot},     {"tokenizer.ggml.eom_token_id", &v->eom},
      {"tokenizer.ggml.unknown_token_id", &v->unk}, {"tokenizer.ggml.padding_token_id", &v->pad},
      {"tokenizer.ggml.mask_token_id", &v->mask},
  };
  for (const auto& [key, id] : special_keys) {
    if (*id >= static_cast<int32_t>(n)) *id = -1;  // a default outside a small vocabulary
    auto it = md.find(key);
    // An id outside the vocabulary keeps the default, as llama.cpp does.
    if (it != md.end() && it->second.i64 >= 0 && it->second.i64 < static_cast<int64_t>(n))
      *id = static_cast<int32_t>(it->second.i64);
  }
  flag("tokenizer.ggml.add_bos_token", v->add_bos);
  flag("tokenizer.ggml.add_eos_token", v->add_eos);
  flag("tokenizer.ggml.add_space_prefix", v->add_space_prefix);
  if (v->spm_style()) {
    v->add_bos = true;
    v->add_space_prefix = false;
  }
  v->chat_template = str("tokenizer.chat_template");
  if (auto it = md.find(kSpmModelKey); it != md.end() && !it->second.bytes.empty())
    v->spm_fingerprint = fnv1a_hex(it->second.bytes);
  v->finish(str("general.name"));
  return Vocab(std::move(v));
}

namespace {

using nlohmann::json;

json read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    throw Error(path.string() + ": not valid JSON: " + e.what());
  }
}

// Llama 3's, Qwen2's and Qwen3.5's Split patterns as tokenizer.json spells them.
constexpr const char* kHfLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kHfQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kHfQwen35 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

// The llama.cpp pre-tokenizer a tokenizer.json's pre_tokenizer amounts to.
std::string hf_pre_tokenizer(const json& pre, const std::string& path) {
  std::vector<const json*> steps;
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers")) {
    for (const json& s : pre["pretokenizers"]) steps.push_back(&s);
  } else if (pre.is_object()) {
    steps.push_back(&pre);
  }
  std::string regex;
  bool byte_level = false, byte_level_regex = false;
  for (const json* s : steps) {
    const std::string type = s->value("type", "");
    if (type == "Split" && s->contains("pattern") && (*s)["pattern"].contains("Regex")) {
      regex = (*s)["pattern"]["Regex"].get<std::string>();
    } else if (type == "ByteLevel") {
      byte_level = true;
      byte_level_regex = s->value("use_regex", true);
    }
  }
  if (!byte_level)
    throw Error(path + ": pre_tokenizer is not byte-level; supported: byte-level BPE (Llama 3, Qwen2, Qwen3.5, GPT-2)");
  if (regex == kHfLlama3) return "llama-bpe";
  if (regex == kHfQwen2) return "qwen2";
  if (regex == kHfQwen35) return "qwen35";
  if (regex.empty() && byte_level_regex) return "gpt-2";
  throw Error(path + ": unknown pre-tokenizer pattern " + (regex.empty() ? std::string("(none)") : "'" + regex + "'") +
              "; supported: Llama 3's (llama-bpe), Qwen2's (qwen2), Qwen3.5's (qwen35), GPT-2's ByteLevel regex "
              "(gpt-2)");
}

// The text llama.cpp's converter (and write_hf) gives an id that no token
// claims.
std::string placeholder_text(int64_t id) { return "[PAD" + std::to_string(id) + "]"; }

// A token given as "text", {"content": "text"} or null.
std::string token_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return {};
}

// Whether a TemplateProcessing post-processor (alone or in a Sequence) puts
// `token` first (or last) in a single sequence.
bool template_adds(const json& post, const std::string& token, bool first) {
  if (!post.is_object() || token.empty()) return false;
  if (post.value("type", "") == "Sequence" && post.contains("processors")) {
    for (const json& p : post["processors"])
      if (template_adds(p, token, first)) return true;
    return false;
  }
  if (post.value("type", "") != "TemplateProcessing" || !post.contains("single") || !post["single"].is_array() ||
      post["single"].empty())
    return false;
  const json& item = first ? post["single"].front() : post["single"].back();
  return item.contains("SpecialToken") && item["SpecialToken"].value("id", "") == token;
}

}  // namespace

Vocab Vocab::from_hf_dir(const std::string& dir, std::optional<int64_t> rows_given) {
  const fs::path json_path = fs::path(dir) / "tokenizer.json";
  const std::string path = json_path.string();
  if (!fs::exists(json_path)) throw Error(path + ": tokenizer file not found");
  const json tj = read_json(json_path);
  auto v = std::make_unique<Impl>();
  v->source = path;
  auto fail = [&](const std::string& what) { throw Error(path + ": " + what); };
  try {
    if (!tj.is_object() || !tj.contains("model") || !tj["model"].is_object()) fail("no \"model\" object");
    const json& model = tj["model"];
    const std::string type = model.value("type", "");
    if (type != "BPE") fail("unknown model type '" + type + "'; supported: BPE (byte-level, or Gemma's)");
    v->kind = Kind::kBpe;
    // Gemma's SentencePiece-style BPE: the normalizer turns spaces into
    // U+2581 and bytes fall back to <0xXX> tokens (llama.cpp's "gemma4").
    const json normalizer = tj.contains("normalizer") ? tj["normalizer"] : json();
    const bool spm_style = normalizer.is_object() && normalizer.value("type", "") == "Replace" &&
                           normalizer.contains("pattern") && normalizer["pattern"].value("String", "") == " " &&
                           normalizer.value("content", "") == kSpace && model.value("byte_fallback", false);
    // Another SentencePiece-style normalizer (Llama 2's and Mistral's
    // prepend U+2581 too) is not this tokenizer; NFC and the like, which
    // llama.cpp ignores as well, are.
    const std::string norm = normalizer.is_null() ? std::string() : normalizer.dump();
    if (!spm_style && (norm.find("Prepend") != std::string::npos || norm.find(kSpace) != std::string::npos))
      fail("normalizer " + norm.substr(0, 200) +
           " is not supported (Gemma's replaces spaces with U+2581 alone); a SentencePiece model (Llama 2, Mistral) "
           "reads from its tokenizer.model");
    v->pre = spm_style ? "gemma4" : hf_pre_tokenizer(tj.contains("pre_tokenizer") ? tj["pre_tokenizer"] : json(), path);
    const PreFlags f = pre_flags(v->pre);
    v->clean_spaces = f.clean_spaces;
    v->ignore_merges = f.ignore_merges;
    v->add_bos = f.add_bos || spm_style;

    if (!model.contains("vocab") || !model["vocab"].is_object()) fail("model has no \"vocab\" object");
    std::vector<std::pair<int64_t, std::string>> entries;
    for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it)
      entries.emplace_back(it.value().get<int64_t>(), it.key());
    std::vector<std::tuple<int64_t, std::string, bool>> added;
    if (tj.contains("added_tokens"))
      for (const json& t : tj["added_tokens"])
        added.emplace_back(t.at("id").get<int64_t>(), t.at("content").get<std::string>(), t.value("special", false));
    int64_t n = 0;
    for (const auto& e : entries) n = std::max(n, e.first + 1);
    // Added tokens past the model's vocabulary (Gemma 3's <image_soft_token>,
    // id 262144 of 262144 rows) no forward can take: dropped, as llama.cpp's
    // converter drops them, so the directory's vocabulary is its GGUF file's.
    std::optional<int64_t> rows = rows_given;
    if (const fs::path config = fs::path(dir) / "config.json"; !rows && fs::exists(config)) {
      const json cj = read_json(config);
      if (cj.is_object() && cj.contains("vocab_size") && cj["vocab_size"].is_number_integer())
        rows = cj["vocab_size"].get<int64_t>();
    }
    if (rows && *rows >= n)
      added.erase(std::remove_if(added.begin(), added.end(), [&](const auto& a) { return std::get<0>(a) >= *rows; }),
                  added.end());
    for (const auto& a : added) n = std::max(n, std::get<0>(a) + 1);
    if (n <= 0 || n > (int64_t{1} << 24)) fail("vocabulary of " + std::to_string(n) + " tokens");
    // Ids no token claims are padding, as llama.cpp's converter writes them;
    // so is a vocab entry that is its own id's placeholder (write_hf's).
    v->texts.assign(n, std::string());
    v->attrs.assign(n, kAttrUnused);
    v->scores.assign(n, 0.0f);
    auto byte_token = [](const std::string& t) {
      return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && std::isxdigit(static_cast<unsigned char>(t[3])) &&
             std::isxdigit(static_cast<unsigned char>(t[4])) && t[5] == '>';
    };
    for (auto& [id, text] : entries) {
      if (id < 0) fail("negative id for token '" + text + "'");
      v->attrs[id] = text == placeholder_text(id) ? kAttrUnused : spm_style && byte_token(text) ? kAttrByte : kAttrNormal;
      v->texts[id] = std::move(text);
    }
    // Gemma's added tokens that are not special are ordinary pieces its
    // merges reach, as llama.cpp's converter types them.
    for (auto& [id, text, special] : added) {
      if (id < 0) fail("negative id for added token '" + text + "'");
      v->texts[id] = std::move(text);
      v->attrs[id] = special ? kAttrControl : spm_style ? (byte_token(v->texts[id]) ? kAttrByte : kAttrNormal) : kAttrUserDefined;
    }
    for (int64_t i = 0; i < n; ++i)
      if (v->texts[i].empty()) v->texts[i] = placeholder_text(i);

    if (!model.contains("merges") || !model["merges"].is_array()) fail("model has no \"merges\" array");
    const json& merges = model["merges"];
    v->merges.reserve(merges.size());
    for (const json& m : merges) {
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) fail("merge '" + s + "' has no space");
        v->merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (m.is_array() && m.size() == 2) {
        v->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        fail("a merge is neither \"a b\" nor [a, b]: " + m.dump());
      }
    }
  } catch (const json::exception& e) {
    fail(std::string("unexpected structure: ") + e.what());
  }

  // The texts of special tokens, resolved to ids once the vocabulary is built.
  std::string bos_text, eos_text, unk_text, pad_text;
  std::optional<bool> add_bos, add_eos;
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const json cfg = read_json(config_path);
    try {
      bos_text = token_content(cfg.value("bos_token", json()));
      eos_text = token_content(cfg.value("eos_token", json()));
      unk_text = token_content(cfg.value("unk_token", json()));
      pad_text = token_content(cfg.value("pad_token", json()));
      if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) add_bos = cfg["add_bos_token"].get<bool>();
      if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) add_eos = cfg["add_eos_token"].get<bool>();
      if (cfg.contains("chat_template")) {
        const json& ct = cfg["chat_template"];
        if (ct.is_string()) {
          v->chat_template = ct.get<std::string>();
        } else if (ct.is_array()) {
          // Named templates: the default one is the chat template.
          for (const json& t : ct)
            if (t.value("name", "") == "default") v->chat_template = t.value("template", "");
        }
      }
    } catch (const json::exception& e) {
      throw Error(config_path.string() + ": unexpected structure: " + e.what());
    }
  }
  v->ids.clear();
  for (size_t i = 0; i < v->texts.size(); ++i) v->ids[v->texts[i]] = static_cast<int32_t>(i);
  v->bos = v->find(bos_text);
  v->eos = v->find(eos_text);
  v->unk = v->find(unk_text);
  v->pad = v->find(pad_text);
  const json post = tj.contains("post_processor") ? tj["post_processor"] : json();
  if (template_adds(post, bos_text, true)) v->add_bos = true;
  if (template_adds(post, eos_text, false)) v->add_eos = true;
  if (add_bos) v->add_bos = *add_bos;
  if (add_eos) v->add_eos = *add_eos;
  if (v->spm_style()) v->add_bos = true;  // as llama.cpp's gemma4 loader
  if (v->add_bos && v->bos < 0) fail("adds a BOS token but names none that the vocabulary has");
  if (v->add_eos && v->eos < 0) fail("adds an EOS token but names none that the vocabulary has");
  v->finish("");
  return Vocab(std::move(v));
}

namespace {

// llama_token_type of a loaded token's attributes: 0 undefined, 1 normal,
// 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
int32_t token_type(uint32_t attr) {
  if (attr & kAttrUnknown) return 2;
  if (attr & kAttrControl) return 3;
  if (attr & kAttrUserDefined) return 4;
  if (attr & kAttrUnused) return 5;
  if (attr & kAttrByte) return 6;
  if (attr & kAttrNormal) return 1;
  return 0;
}

// `s` as a JSON string; throws naming `what` for invalid UTF-8.
std::string json_string(const std::string& s, const std::string& what) {
  try {
    return json(s).dump();
  } catch (const json::exception&) {
    throw Error(what + " is not valid UTF-8; tokenizer.json cannot hold it");
  }
}

void write_text(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(tmp.string() + ": cannot create");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out.flush()) throw Error(tmp.string() + ": write failed");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(path.string() + ": rename failed: " + ec.message());
}

}  // namespace

void Vocab::add_to_gguf(GgufWriter& g) const {
  const Impl& v = *impl_;
  const bool spm = v.kind == Kind::kSpm;
  g.add_string("tokenizer.ggml.model", spm ? "llama" : v.spm_style() ? "gemma4" : "gpt2");
  // SentencePiece vocabularies have no pre-tokenizer; converters write "default".
  g.add_string("tokenizer.ggml.pre", spm ? "default" : v.pre);
  g.add_strings("tokenizer.ggml.tokens", v.texts);
  if (spm || std::any_of(v.scores.begin(), v.scores.end(), [](float s) { return s != 0.0f; }))
    g.add_f32s("tokenizer.ggml.scores", v.scores);
  std::vector<int32_t> types(v.loaded_attrs.size());
  std::transform(v.loaded_attrs.begin(), v.loaded_attrs.end(), types.begin(), token_type);
  g.add_i32s("tokenizer.ggml.token_type", types);
  if (!spm) {
    std::vector<std::string> merges;
    merges.reserve(v.merges.size());
    for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
    g.add_strings("tokenizer.ggml.merges", merges);
  }
  const std::pair<const char*, int32_t> ids[] = {
      {"tokenizer.ggml.bos_token_id", v.loaded_bos},     {"tokenizer.ggml.eos_token_id", v.loaded_eos},
      {"tokenizer.ggml.eot_token_id", v.loaded_eot},     {"tokenizer.ggml.eom_token_id", v.loaded_eom},
      {"tokenizer.ggml.unknown_token_id", v.loaded_unk}, {"tokenizer.ggml.padding_token_id", v.loaded_pad},
      {"tokenizer.ggml.mask_token_id", v.mask},
  };
  for (const auto& [key, id] : ids)
    if (id >= 0) g.add_u32(key, static_cast<uint32_t>(id));
  g.add_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  g.add_bool("tokenizer.ggml.add_eos_token", v.add_eos);
  if (spm || v.add_space_prefix || v.spm_style()) g.add_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  if (!v.chat_template.empty()) g.add_string("tokenizer.chat_template", v.chat_template);
}

void Vocab::write_hf(const std::string& dir) const {
  const Impl& v = *impl_;
  if (v.kind == Kind::kSpm)
    throw Error(v.source + ": a SentencePiece vocabulary has no tokenizer.json form here; "
                "SentencePiece vocabularies are written as tokenizer.model");
  // The pre-tokenizer as Hugging Face files spell it.
  json pre;
  if (v.pre == "llama-bpe" || v.pre == "qwen2" || v.pre == "qwen35") {
    const char* regex = v.pre == "qwen2" ? kHfQwen2 : v.pre == "qwen35" ? kHfQwen35 : kHfLlama3;
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            json::array({{{"type", "Split"},
                          {"pattern", {{"Regex", regex}}},
                          {"behavior", "Isolated"},
                          {"invert", false}},
                         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}};
  } else if (v.pre == "gpt-2") {
    pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  } else if (v.spm_style()) {
    // Gemma's own: a split at spaces that never fires, as they are U+2581.
    pre = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}};
  } else {
    throw Error(v.source + ": pre-tokenizer '" + v.pre +
                "' has no tokenizer.json form here; supported: llama-bpe, qwen2, qwen35, gpt-2, gemma4");
  }
  const int32_t n = static_cast<int32_t>(v.texts.size());
  for (int32_t i = 0; i < n; ++i)
    if (v.find(v.texts[i]) != i)
      throw Error(v.source + ": tokens " + std::to_string(v.find(v.texts[i])) + " and " + std::to_string(i) +
                  " share the text '" + v.texts[i] + "', which tokenizer.json's vocab cannot hold");

  json added = json::array();
  for (int32_t i = 0; i < n; ++i) {
    const uint32_t a = v.loaded_attrs[i];
    if (!(a & (kAttrControl | kAttrUserDefined))) continue;
    added.push_back({{"id", i},
                     {"content", v.texts[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", (a & kAttrControl) != 0}});
  }
  // BOS and EOS as the vocabulary adds them, so that Hugging Face's readers
  // add them too.
  const json byte_level_post = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  json post = v.spm_style() ? json() : byte_level_post;
  const bool bos = v.add_bos && v.bos >= 0, eos = v.add_eos && v.eos >= 0;
  if (bos || eos) {
    auto special = [&](int32_t id, int type) { return json{{"SpecialToken", {{"id", v.texts[id]}, {"type_id", type}}}}; };
    auto sequence = [](const char* id, int type) { return json{{"Sequence", {{"id", id}, {"type_id", type}}}}; };
    json single = json::array();
    if (bos) single.push_back(special(v.bos, 0));
    single.push_back(sequence("A", 0));
    if (eos) single.push_back(special(v.eos, 0));
    json pair = single;
    if (bos) pair.push_back(special(v.bos, 1));
    pair.push_back(sequence("B", 1));
    if (eos) pair.push_back(special(v.eos, 1));
    json tokens = json::object();
    for (int32_t id : {bos ? v.bos : -1, eos ? v.eos : -1})
      if (id >= 0) tokens[v.texts[id]] = {{"id", v.texts[id]}, {"ids", json::array({id})}, {"tokens", json::array({v.texts[id]})}};
    const json templ = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", tokens}};
    post = v.spm_style() ? templ : json{{"type", "Sequence"}, {"processors", json::array({byte_level_post, templ})}};
  }
  const json decoder =
      v.spm_style()
          ? json{{"type", "Sequence"},
                 {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                                           {{"type", "ByteFallback"}},
                                           {{"type", "Fuse"}}})}}
          : json{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};

  // Written by hand, vocab in id order and merges in rank order as Hugging
  // Face's files are; nlohmann::json would sort the vocab by text.
  std::string out;
  out.reserve(v.texts.size() * 24 + v.merges.size() * 24 + (1 << 16));
  out += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  try {
    out += "  \"added_tokens\": [";
    for (size_t i = 0; i < added.size(); ++i) out += (i ? ",\n    " : "\n    ") + added[i].dump();
    out += added.empty() ? "],\n" : "\n  ],\n";
    out += v.spm_style() ? "  \"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"" +
                               std::string(kSpace) + "\"},\n"
                         : "  \"normalizer\": null,\n";
    out += "  \"pre_tokenizer\": " + pre.dump() + ",\n";
    out += "  \"post_processor\": " + post.dump() + ",\n";
  } catch (const json::exception&) {
    throw Error(v.source + ": a control or user-defined token's text is not valid UTF-8; tokenizer.json cannot hold it");
  }
  out += "  \"decoder\": " + decoder.dump() + ",\n";
  out += "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": " +
         (v.spm_style() && v.unk >= 0 ? json_string(v.texts[v.unk], "the unknown token") : std::string("null")) +
         ",\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": " +
         (v.spm_style() ? "true" : "false") + ",\n    \"byte_fallback\": " + (v.spm_style() ? "true" : "false") + ",\n";
  out += std::string("    \"ignore_merges\": ") + (v.ignore_merges ? "true" : "false") + ",\n";
  out += "    \"vocab\": {";
  for (int32_t i = 0; i < n; ++i) {
    out += i ? ",\n      " : "\n      ";
    out += json_string(v.texts[i], "token " + std::to_string(i));
    out += ": ";
    out += std::to_string(i);
  }
  out += "\n    },\n    \"merges\": [";
  // "a b" strings where every merge can be one, else [a, b] pairs.
  const bool pairs = std::any_of(v.merges.begin(), v.merges.end(), [](const auto& m) {
    return m.first.empty() || m.second.empty() || m.first.find(' ') != std::string::npos ||
           m.second.find(' ') != std::string::npos;
  });
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const auto& [a, b] = v.merges[r];
    const std::string what = "merge " + std::to_string(r);
    out += r ? ",\n      " : "\n      ";
    out += pairs ? "[" + json_string(a, what) + ", " + json_string(b, what) + "]" : json_string(a + " " + b, what);
  }
  out += "\n    ]\n  }\n}\n";

  json cfg = json::object();
  cfg["add_bos_token"] = v.add_bos;
  cfg["add_eos_token"] = v.add_eos;
  const std::pair<const char*, int32_t> named[] = {
      {"bos_token", v.bos}, {"eos_token", v.eos}, {"unk_token", v.unk}, {"pad_token", v.pad}};
  for (const auto& [key, id] : named) cfg[key] = id >= 0 ? json(v.texts[id]) : json();
  cfg["clean_up_tokenization_spaces"] = v.clean_spaces;
  cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
  if (!v.chat_template.empty()) cfg["chat_template"] = v.chat_template;
  std::string cfg_text;
  try {
    cfg_text = cfg.dump(2) + "\n";
  } catch (const json::exception&) {
    throw Error(v.source + ": a special token's text or the chat template is not valid UTF-8");
  }

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create: " + ec.message());
  write_text(fs::path(dir) / "tokenizer.json", out);
  write_text(fs::path(dir) / "tokenizer_config.json", cfg_text);
}

Vocab::Kind Vocab::kind() const { return impl_->kind; }
const std::string& Vocab::pre() const { return impl_->pre; }
int32_t Vocab::size() const { return static_cast<int32_t>(impl_->texts.size()); }
const std::string& Vocab::text(int32_t id) const {
  impl_->check_id(id);
  return impl_->texts[id];
}
float Vocab::score(int32_t id) const {
  impl_->check_id(id);
  return impl_->scores[id];
}
uint32_t Vocab::attr(int32_t id) const {
  impl_->check_id(id);
  return impl_->attrs[id];
}
int32_t Vocab::find(const std::string& text) const { return impl_->find(text); }
int32_t Vocab::bos_id() const { return impl_->bos; }
int32_t Vocab::eos_id() const { return impl_->eos; }
int32_t Vocab::eot_id() const { return impl_->eot; }
int32_t Vocab::eom_id() const { return impl_->eom; }
int32_t Vocab::unk_id() const { return impl_->unk; }
int32_t Vocab::pad_id() const { return impl_->pad; }
bool Vocab::add_bos() const { return impl_->add_bos; }
bool Vocab::add_eos() const { return impl_->add_eos; }
bool Vocab::add_space_prefix() const { return impl_->add_space_prefix; }
const std::vector<int32_t>& Vocab::eog_ids() const { return impl_->eog; }
bool Vocab::is_eog(int32_t id) const { return std::binary_search(impl_->eog.begin(), impl_->eog.end(), id); }
const std::string& Vocab::chat_template() const { return impl_->chat_template; }

std::vector<int32_t> Vocab::tokenize(const std::string& text, bool add_special, bool parse_special,
                                     const std::vector<std::pair<size_t, size_t>>* literal) const {
  const Impl& v = *impl_;
  std::vector<int32_t> out;
  const std::vector<Fragment> frags = v.partition(text, parse_special, literal);
  if (add_special && v.add_bos) {
    if (v.bos < 0) throw Error(v.source + ": the vocabulary adds a BOS token but has none");
    out.push_back(v.bos);
  }
  // SentencePiece's leading space goes before the text and after every token
  // found in it, whether or not a BOS was added.
  bool after_special = true;
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    if (v.kind == Kind::kSpm) {
      std::string s = v.add_space_prefix && after_special ? " " : "";
      s.append(text, f.offset, f.length);
      replace_all(s, " ", kSpace);
      v.tokenize_spm(s, out);
    } else if (v.spm_style()) {
      std::string s = text.substr(f.offset, f.length);
      replace_all(s, " ", kSpace);
      v.tokenize_bpe(s, out);
    } else {
      v.tokenize_bpe(text.substr(f.offset, f.length), out);
    }
    after_special = false;
  }
  if (add_special && v.add_eos) {
    if (v.eos < 0) throw Error(v.source + ": the vocabulary adds an EOS token but has none");
    out.push_back(v.eos);
  }
  return out;
}

std::string Vocab::token_to_piece(int32_t id, bool special) const { return impl_->piece(id, special); }

std::string Vocab::detokenize(const std::vector<int32_t>& ids, bool remove_special, bool unparse_special) const {
  return impl_->detokenize(ids, remove_special, unparse_special, true);
}

std::string Vocab::stream_text(const std::vector<int32_t>& ids) const { return impl_->detokenize(ids, false, false, false); }

std::string Vocab::fingerprint() const {
  const Impl& v = *impl_;
  if (!v.spm_fingerprint.empty()) return v.spm_fingerprint;
  std::string s;
  auto num = [&](int64_t x) { s.append(reinterpret_cast<const char*>(&x), sizeof x); };
  auto str = [&](const std::string& t) {
    num(static_cast<int64_t>(t.size()));
    s += t;
  };
  str(v.kind == Kind::kSpm ? "spm" : "bpe");
  str(v.pre);
  num(static_cast<int64_t>(v.texts.size()));
  for (size_t i = 0; i < v.texts.size(); ++i) {
    str(v.texts[i]);
    num(v.attrs[i]);
    uint32_t bits;
    std::memcpy(&bits, &v.scores[i], sizeof bits);
    num(bits);
  }
  num(static_cast<int64_t>(v.merges.size()));
  for (const auto& [a, b] : v.merges) {
    str(a);
    str(b);
  }
  // The BOS id counts only where it is added: GGUF cannot say "no BOS", so a
  // vocabulary without one (Qwen's) reads back from GGUF with llama.cpp's
  // default id, which tokenizes the same.
  for (int32_t id : {v.add_bos ? v.bos : -1, v.eos, v.eot, v.eom, v.unk, v.pad}) num(id);
  for (bool f : {v.add_bos, v.add_eos, v.add_space_prefix, v.clean_spaces, v.ignore_merges}) num(f);
  return fnv1a_hex(s);
}

}  // namespace splitspec

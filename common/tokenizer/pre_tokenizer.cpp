#include "common/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <deque>
#include <mutex>

#include "common/util/error.h"

namespace splitspec {

namespace {

// llama.cpp's regular expressions, with their case-insensitive contraction
// group spelled out: PCRE2's caseless matching folds more than ASCII (the
// long s matches s) where llama.cpp lowercases ASCII only.
constexpr const char* kContractions = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
// GPT-2's pattern with the `|\s+` that llama.cpp's hand-written matcher for
// it implements although its spelling of the pattern leaves it out.
constexpr const char* kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
constexpr const char* kLlama3Tail =
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Tail =
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen3.5's: Qwen2's with combining marks (\p{M}) kept in words.
constexpr const char* kQwen35Tail =
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

using Gaps = PreTokenizerPattern::Gaps;

struct Registry {
  std::mutex mu;
  // A deque: a spec found stays where it is while others are registered.
  std::deque<PreTokenizerDef> specs;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    reg->specs = {
        {{"llama-bpe", "llama3", "llama-v3", "dbrx", "smaug-bpe"},
         {{std::string(kContractions) + kLlama3Tail, Gaps::kPerCodePoint}}},
        {{"qwen2", "deepseek-r1-qwen", "stablelm2"}, {{std::string(kContractions) + kQwen2Tail, Gaps::kPerCodePoint}}},
        {{"qwen35"}, {{std::string(kContractions) + kQwen35Tail, Gaps::kPerCodePoint}}},
        {{"gpt-2", "phi-2", "mpt", "olmo"}, {{kGpt2, Gaps::kPerCodePoint}}},
        {{"smollm", "starcoder", "refact", "command-r", "codeshell"},
         {{"\\p{N}", Gaps::kWhole}, {kGpt2, Gaps::kPerCodePoint}}},
        // Gemma 3's and 4's: split only at newlines, as llama.cpp's gemma4.
        {{"gemma4"}, {{"[^\\n]+|[\\n]+", Gaps::kWhole}}, false},
        {{"default"},
         {{"[\\p{P}\\$\\+<=>\\^~\\|]+", Gaps::kWhole},
          {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", Gaps::kWhole},
          {"\\p{N}+", Gaps::kWhole},
          {"[0-9][0-9][0-9]", Gaps::kWhole}}},
    };
    return reg;
  }();
  return *r;
}

// Throws splitspec::Error naming the pre-tokenizer and where PCRE2 stopped.
pcre2_code* compile(const std::string& regex, const std::string& pre) {
  int err = 0;
  PCRE2_SIZE at = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.c_str()), regex.size(), PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error("pre-tokenizer " + pre + ": cannot compile /" + regex + "/ at " + std::to_string(at) + ": " +
                reinterpret_cast<const char*>(msg));
  }
  return code;
}

const PreTokenizerDef* find_spec(const std::string& pre) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& spec : r.specs)
    for (const std::string& name : spec.names)
      if (pre == name) return &spec;
  return nullptr;
}

struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<int, 512> to_byte;  // every stand-in code point is below 324
};

const ByteTables& byte_tables() {
  static const ByteTables tables = [] {
    ByteTables t;
    t.to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the rest, in byte
    // order, for the code points from U+0100 on.
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const int cp = printable(b) ? b : next++;
      append_utf8(t.to_unicode[b], static_cast<uint32_t>(cp));
      t.to_byte[cp] = b;
    }
    return t;
  }();
  return tables;
}

}  // namespace

std::vector<uint32_t> utf8_code_points(const std::string& text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  const size_t n = text.size();
  auto cont = [&](size_t i) { return i < n && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80; };
  for (size_t i = 0; i < n;) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    if (b < 0x80) {
      out.push_back(b);
      i += 1;
    } else if ((b & 0xE0) == 0xC0 && cont(i + 1)) {
      out.push_back(((b & 0x1Fu) << 6) | (text[i + 1] & 0x3F));
      i += 2;
    } else if ((b & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      out.push_back(((b & 0x0Fu) << 12) | ((text[i + 1] & 0x3Fu) << 6) | (text[i + 2] & 0x3F));
      i += 3;
    } else if ((b & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      out.push_back(((b & 0x07u) << 18) | ((text[i + 1] & 0x3Fu) << 12) | ((text[i + 2] & 0x3Fu) << 6) | (text[i + 3] & 0x3F));
      i += 4;
    } else {
      out.push_back(0xFFFD);
      i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | ((cp >> 18) & 0x07));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

const std::string& byte_to_unicode(uint8_t byte) { return byte_tables().to_unicode[byte]; }

int unicode_to_byte(uint32_t cp) { return cp < 512 ? byte_tables().to_byte[cp] : -1; }

std::string supported_pre_tokenizers() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::string s;
  for (const auto& spec : r.specs)
    for (const std::string& name : spec.names) s += (s.empty() ? "" : ", ") + name;
  return s;
}

void register_pre_tokenizer(PreTokenizerDef def) {
  if (def.names.empty() || def.patterns.empty()) throw Error("a pre-tokenizer needs a name and a pattern");
  // Compiled once now, so that a bad pattern fails here and not at a model's load.
  for (const PreTokenizerPattern& p : def.patterns) pcre2_code_free(compile(p.regex, def.names[0]));
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const std::string& name : def.names)
    for (const auto& spec : r.specs)
      for (const std::string& taken : spec.names)
        if (name == taken) throw Error("pre-tokenizer '" + name + "' is already registered");
  r.specs.push_back(std::move(def));
}

bool is_supported_pre_tokenizer(const std::string& pre) { return find_spec(pre) != nullptr; }

struct PreTokenizer::Pattern {
  pcre2_code* code = nullptr;
  Gaps gaps = Gaps::kWhole;
  ~Pattern() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::string& pre) {
  const PreTokenizerDef* spec = find_spec(pre);
  if (!spec) throw Error("unknown pre-tokenizer '" + pre + "'; supported: " + supported_pre_tokenizers());
  for (const auto& p : spec->patterns) {
    auto pattern = std::make_unique<Pattern>();
    pattern->code = compile(p.regex, pre);
    // JIT where the platform has it; the interpreter otherwise gives the
    // same matches.
    pcre2_jit_compile(pattern->code, PCRE2_JIT_COMPLETE);
    pattern->gaps = p.gaps;
    patterns_.push_back(std::move(pattern));
  }
  byte_encode_ = spec->byte_encode;
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::split(const std::string& text) const {
  const std::vector<uint32_t> cps = utf8_code_points(text);
  // PCRE2 wants valid UTF-8: code points that UTF-8 cannot carry (from
  // sequences llama.cpp decodes leniently) are matched as U+FFFD. `starts`
  // maps each code point to its byte offset in that subject.
  std::string subject;
  subject.reserve(text.size());
  std::vector<size_t> starts(cps.size() + 1);
  for (size_t i = 0; i < cps.size(); ++i) {
    starts[i] = subject.size();
    const uint32_t cp = cps[i];
    append_utf8(subject, (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF ? 0xFFFD : cp);
  }
  starts[cps.size()] = subject.size();
  auto cp_at_byte = [&](size_t byte, size_t lo) {
    while (starts[lo] < byte) ++lo;
    return lo;
  };

  // Words as [begin, end) code point ranges; each pattern splits the words
  // the previous one left, never matching across their boundaries.
  std::vector<std::pair<size_t, size_t>> words;
  if (!cps.empty()) words.push_back({0, cps.size()});
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  for (const auto& pattern : patterns_) {
    std::vector<std::pair<size_t, size_t>> next;
    next.reserve(words.size());
    auto gap = [&](size_t a, size_t b) {
      if (pattern->gaps == Gaps::kWhole) {
        if (a < b) next.push_back({a, b});
      } else {
        for (size_t i = a; i < b; ++i) next.push_back({i, i + 1});
      }
    };
    for (const auto& [wb, we] : words) {
      const auto* base = reinterpret_cast<PCRE2_SPTR>(subject.data() + starts[wb]);
      const size_t len = starts[we] - starts[wb];
      size_t pos = 0;  // bytes into the word
      size_t cp = wb;  // the code point at `pos`
      while (pos < len) {
        const int rc = pcre2_match(pattern->code, base, len, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t mb = cp_at_byte(starts[wb] + ov[0], cp);
        const size_t me = cp_at_byte(starts[wb] + ov[1], mb);
        gap(cp, mb);
        if (me > mb) {
          next.push_back({mb, me});
          cp = me;
        } else {
          // An empty match: step over one code point so that matching moves on.
          gap(mb, std::min(mb + 1, we));
          cp = std::min(mb + 1, we);
        }
        pos = starts[cp] - starts[wb];
      }
      gap(cp, we);
    }
    words = std::move(next);
  }
  pcre2_match_data_free(md);

  std::vector<std::string> out;
  out.reserve(words.size());
  const auto& to_unicode = byte_tables().to_unicode;
  for (const auto& [b, e] : words) {
    std::string raw;
    for (size_t i = b; i < e; ++i) append_utf8(raw, cps[i]);
    if (!byte_encode_) {
      out.push_back(std::move(raw));
      continue;
    }
    std::string encoded;
    encoded.reserve(raw.size() * 2);
    for (unsigned char c : raw) encoded += to_unicode[c];
    out.push_back(std::move(encoded));
  }
  return out;
}

}  // namespace splitspec

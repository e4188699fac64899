#include "common/train/corpus.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/util/error.h"

namespace splitspec {

std::vector<int32_t> tokenize_corpus(const std::string& path, const Tokenizer& tok, int32_t bos_id, int64_t max_tokens) {
  if (!std::filesystem::is_regular_file(path)) throw Error(path + ": corpus file not found");
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  std::vector<int32_t> out;
  std::string line, doc;
  auto flush = [&]() {
    if (doc.empty()) return;
    out.push_back(bos_id);
    const auto ids = tok.encode(doc);
    out.insert(out.end(), ids.begin(), ids.end());
    out.push_back(tok.eos_id());
    doc.clear();
  };
  const auto enough = [&] { return max_tokens > 0 && static_cast<int64_t>(out.size()) >= max_tokens; };
  while (!enough() && std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      flush();
      continue;
    }
    if (!doc.empty()) doc += ' ';
    doc += line;
  }
  if (!enough()) flush();
  if (out.empty()) throw Error(path + ": corpus is empty");
  if (enough()) out.resize(static_cast<size_t>(max_tokens));
  return out;
}

WindowSampler::WindowSampler(const std::vector<int32_t>& tokens, int64_t seq_len) : tokens_(tokens), seq_len_(seq_len) {
  if (static_cast<int64_t>(tokens.size()) < seq_len + 1)
    throw Error("corpus has " + std::to_string(tokens.size()) + " tokens, fewer than one training window of " +
                std::to_string(seq_len + 1));
}

std::vector<int64_t> WindowSampler::random_batch(uint64_t seed, int64_t step, int64_t batch) const {
  std::seed_seq seq{seed, static_cast<uint64_t>(step)};
  std::mt19937_64 rng(seq);
  const uint64_t starts = tokens_.size() - static_cast<uint64_t>(seq_len_);
  std::vector<int64_t> out;
  out.reserve(batch * (seq_len_ + 1));
  for (int64_t b = 0; b < batch; ++b) {
    const uint64_t s = rng() % starts;
    out.insert(out.end(), tokens_.begin() + s, tokens_.begin() + s + seq_len_ + 1);
  }
  return out;
}

int64_t WindowSampler::num_windows() const { return (static_cast<int64_t>(tokens_.size()) - 1) / seq_len_; }

std::vector<int64_t> WindowSampler::window(int64_t index) const {
  const int64_t s = index * seq_len_;
  return {tokens_.begin() + s, tokens_.begin() + s + seq_len_ + 1};
}

}  // namespace splitspec

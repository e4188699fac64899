#include "common/drafting/shortlist_options.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/tokenizer/tokenizer.h"
#include "common/util/error.h"
#include "common/util/json_integer.h"

namespace splitspec {

namespace {

std::string read_text(const std::string& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(what + ": cannot read " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

std::vector<int32_t> rank_tokens(const std::string& text, const Tokenizer& tok) {
  std::vector<int32_t> all;
  // Line by line: a corpus of many megabytes is not one encode's input.
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const std::vector<int32_t> ids = tok.encode(line);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  return tokens_by_frequency(all, tok.vocab_size(), tok.vocab_size());
}

std::shared_ptr<const Shortlist> shortlist_from_options(
    DrafterOptions& opt, const std::string& drafter, const std::string& tokenizer_path, int64_t vocab,
    const std::function<Rows(const std::vector<int64_t>& ids)>& head_rows) {
  const int k = opt.integer("shortlist", 0);
  const std::string ranking = opt.text("ranking", ""), corpus = opt.text("corpus", "");
  const std::string what = "drafter " + drafter;
  if (k < 0) throw Error(what + ": shortlist must be a token count (0: the whole vocabulary), got " + std::to_string(k));
  if (k == 0) {
    if (!ranking.empty() || !corpus.empty()) throw Error(what + ": ranking and corpus rank tokens for a shortlist=K");
    return nullptr;
  }
  if (ranking.empty() == corpus.empty())
    throw Error(what + ": shortlist=" + std::to_string(k) +
                " takes its tokens from one ranking: ranking=FILE (a JSON array of ids, most frequent first) or "
                "corpus=FILE (text to count them in)");
  std::vector<int32_t> ids;
  if (!ranking.empty()) {
    try {
      ids = json_integers<int32_t>(nlohmann::json::parse(read_text(ranking, what)), "ranking");
    } catch (const nlohmann::json::exception& e) {
      throw Error(what + ": " + ranking + ": not a JSON array of token ids: " + e.what());
    } catch (const Error& e) {
      throw Error(what + ": " + ranking + ": " + e.what());
    }
  } else {
    ids = rank_tokens(read_text(corpus, what), Tokenizer(tokenizer_path));
  }
  std::vector<bool> seen(static_cast<size_t>(vocab), false);
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab)
      throw Error(what + ": the ranking holds id " + std::to_string(id) + ", outside the vocabulary of " + std::to_string(vocab));
    if (seen[static_cast<size_t>(id)]) throw Error(what + ": the ranking holds id " + std::to_string(id) + " twice");
    seen[static_cast<size_t>(id)] = true;
  }
  if (static_cast<int64_t>(ids.size()) < k)
    throw Error(what + ": shortlist=" + std::to_string(k) + " but the ranking has " + std::to_string(ids.size()) + " tokens");
  ids.resize(static_cast<size_t>(k));
  return std::make_shared<const Shortlist>(ids, head_rows(std::vector<int64_t>(ids.begin(), ids.end())));
}

}  // namespace splitspec

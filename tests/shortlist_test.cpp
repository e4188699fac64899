// A head's shortlist: scores for its tokens alone, -inf elsewhere; the
// rankings it is taken from, and every bad one refused in one clear line.
#include "common/drafting/shortlist_options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/kernels/kernels.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/test_util.h"

namespace splitspec::test {
namespace {

constexpr int64_t kVocab = 10, kHidden = 4;

// Row i of the head: i, i + 1, ... (exact in half precision).
Rows head_rows(const std::vector<int64_t>& ids) {
  Rows r(static_cast<int64_t>(ids.size()), kHidden);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < kHidden; ++j) r.row(static_cast<int64_t>(i))[j] = static_cast<float>(ids[i] + j);
  return r;
}

std::shared_ptr<const Shortlist> from(const std::map<std::string, std::string>& values, const std::string& tokenizer = "") {
  DrafterOptions opt("mtp", values);
  auto s = shortlist_from_options(opt, "mtp", tokenizer, kVocab, head_rows);
  opt.finish();
  return s;
}

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.str(name)) << text;
  return dir.str(name);
}

}  // namespace

TEST(Shortlist, ScoresItsTokensAndNothingElse) {
  TempDir dir;
  const auto s = from({{"shortlist", "3"}, {"ranking", write(dir, "r.json", "[7, 2, 9, 4]")}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->tokens(), (std::vector<int32_t>{7, 2, 9}));
  EXPECT_EQ(s->bytes(), 3u * kHidden * 2);
  Rows h(2, kHidden);
  for (int64_t j = 0; j < kHidden; ++j) {
    h.row(0)[j] = 1.0f;
    h.row(1)[j] = j == 0 ? 1.0f : 0.0f;
  }
  const Rows logits = s->logits(h, kVocab);
  ASSERT_EQ(logits.rows(), 2);
  ASSERT_EQ(logits.cols(), kVocab);
  for (int64_t t = 0; t < kVocab; ++t) {
    const bool in = t == 7 || t == 2 || t == 9;
    if (!in) {
      EXPECT_TRUE(std::isinf(logits.row(0)[t]) && logits.row(0)[t] < 0) << t;
      continue;
    }
    EXPECT_FLOAT_EQ(logits.row(0)[t], static_cast<float>(4 * t + 6)) << t;  // t + (t+1) + (t+2) + (t+3)
    EXPECT_FLOAT_EQ(logits.row(1)[t], static_cast<float>(t)) << t;
  }
}

TEST(Shortlist, NoneWithoutTheOption) {
  EXPECT_EQ(from({}), nullptr);
  EXPECT_EQ(from({{"shortlist", "0"}}), nullptr);
}

TEST(Shortlist, CorpusRanksTokensByCount) {
  TempDir dir;
  const Tokenizer tok(demo_target_dir());
  // Two words the vocabulary holds whole.
  std::vector<std::string> words;
  for (const char* w : {"the", "and", "of", "to", "robot", "arm"})
    if (tok.encode(w).size() == 1) words.push_back(w);
  ASSERT_GE(words.size(), 2u);
  const int32_t once = tok.encode(words[0])[0], thrice = tok.encode(words[1])[0];
  const std::string corpus = write(dir, "c.txt", words[0] + "\n" + words[1] + "\n" + words[1] + "\n" + words[1] + "\n");
  DrafterOptions opt("mtp", {{"shortlist", "2"}, {"corpus", corpus}});
  const auto s = shortlist_from_options(opt, "mtp", demo_target_dir(), tok.vocab_size(), [](const std::vector<int64_t>& ids) {
    return Rows(static_cast<int64_t>(ids.size()), kHidden);
  });
  ASSERT_TRUE(s);
  EXPECT_EQ(s->tokens(), (std::vector<int32_t>{thrice, once}));
}

TEST(Shortlist, BadRankingsAreRefusedClearly) {
  TempDir dir;
  const auto err = [&](const std::map<std::string, std::string>& v) { return error_of([&] { from(v); }); };
  EXPECT_NE(err({{"shortlist", "3"}}).find("takes its tokens from one ranking"), std::string::npos);
  EXPECT_NE(err({{"shortlist", "3"}, {"ranking", "a"}, {"corpus", "b"}}).find("from one ranking"), std::string::npos);
  EXPECT_NE(err({{"ranking", write(dir, "r0.json", "[1]")}}).find("for a shortlist=K"), std::string::npos);
  EXPECT_NE(err({{"shortlist", "-1"}}).find("must be a token count"), std::string::npos);
  EXPECT_NE(err({{"shortlist", "2"}, {"ranking", dir.str("missing.json")}}).find("cannot read"), std::string::npos);
  EXPECT_NE(err({{"shortlist", "2"}, {"ranking", write(dir, "r1.json", "{\"a\": 1}")}}).find("must be an array"),
            std::string::npos);
  EXPECT_NE(err({{"shortlist", "2"}, {"ranking", write(dir, "r2.json", "[1, 2")}}).find("not a JSON array"),
            std::string::npos);
  EXPECT_NE(err({{"shortlist", "2"}, {"ranking", write(dir, "r3.json", "[1, 10]")}}).find("outside the vocabulary of 10"),
            std::string::npos);
  EXPECT_NE(err({{"shortlist", "2"}, {"ranking", write(dir, "r4.json", "[3, 3]")}}).find("id 3 twice"), std::string::npos);
  EXPECT_NE(err({{"shortlist", "5"}, {"ranking", write(dir, "r5.json", "[3, 4]")}}).find("the ranking has 2 tokens"),
            std::string::npos);
}

}  // namespace splitspec::test

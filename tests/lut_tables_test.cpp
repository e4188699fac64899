#include "common/drafting/lut_tables.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "common/util/error.h"
#include "common/weights/safetensors.h"
#include "tests/test_util.h"

namespace splitspec::test {
namespace {

std::vector<LutCandidate> look(const LutTables& t, const std::vector<int32_t>& context) {
  std::vector<LutCandidate> out;
  t.lookup(context.data() + context.size(), static_cast<int64_t>(context.size()), out);
  return out;
}

std::vector<int32_t> tokens_of(const std::vector<LutCandidate>& c) {
  std::vector<int32_t> out;
  for (const LutCandidate& x : c) out.push_back(x.token);
  return out;
}

void update(LutTables& t, const std::vector<int32_t>& context, const std::vector<int32_t>& ids,
            const std::vector<float>& probs) {
  t.update(context.data() + context.size(), static_cast<int64_t>(context.size()), ids, probs);
}

TEST(LutTables, AddAndReplaceKeepRowsSortedAndUnique) {
  LutOptions o;
  o.k = 3;
  o.order = 1;
  LutTables t(20, o);
  EXPECT_TRUE(look(t, {5}).empty());
  update(t, {5}, {7, 8}, {0.5f, 0.25f});
  EXPECT_EQ(tokens_of(look(t, {5})), (std::vector<int32_t>{7, 8}));
  // Add: a free place takes the new token; replace: 8 gets its new probability.
  update(t, {5}, {9, 8}, {0.125f, 0.75f});
  EXPECT_EQ(tokens_of(look(t, {5})), (std::vector<int32_t>{8, 7, 9}));
  EXPECT_FLOAT_EQ(look(t, {5})[0].prob, 0.75f);
  // Full: a less probable newcomer is dropped, a more probable one replaces the last.
  update(t, {5}, {10}, {0.0625f});
  EXPECT_EQ(tokens_of(look(t, {5})), (std::vector<int32_t>{8, 7, 9}));
  update(t, {5}, {11}, {0.375f});
  EXPECT_EQ(tokens_of(look(t, {5})), (std::vector<int32_t>{8, 7, 11}));
  // Observing a known token changes nothing; a new one takes the lowest probability.
  t.observe(std::vector<int32_t>{5}.data() + 1, 1, 7);
  EXPECT_EQ(tokens_of(look(t, {5})), (std::vector<int32_t>{8, 7, 11}));
  t.observe(std::vector<int32_t>{6}.data() + 1, 1, 3);
  ASSERT_EQ(look(t, {6}).size(), 1u);
  EXPECT_FLOAT_EQ(look(t, {6})[0].prob, 0.5f);
  // Out-of-range ids and non-finite probabilities are skipped.
  update(t, {6}, {-1, 20, 4}, {0.9f, 0.9f, std::nanf("")});
  EXPECT_EQ(tokens_of(look(t, {6})), (std::vector<int32_t>{3}));
}

TEST(LutTables, LongestKeyFirstThenShorterOnesFillUp) {
  LutOptions o;
  o.k = 4;
  o.order = 3;
  o.slots = 64;
  LutTables t(50, o);
  update(t, {1, 2, 3}, {10, 11}, {0.6f, 0.3f});  // keys (3), (2,3) and (1,2,3)
  update(t, {9, 3}, {12, 10}, {0.9f, 0.05f});    // keys (3) and (9,3)
  // Context (1,2,3): its own row first, then (2,3)'s (the same), then (3)'s
  // without repeating 10.
  EXPECT_EQ(tokens_of(look(t, {1, 2, 3})), (std::vector<int32_t>{10, 11, 12}));
  // Context (4,9,3): no 3-token row; (9,3) then (3).
  EXPECT_EQ(tokens_of(look(t, {4, 9, 3})), (std::vector<int32_t>{12, 10, 11}));
  // A context of one token reads only the unigram row (10 now at 0.05).
  EXPECT_EQ(tokens_of(look(t, {3})), (std::vector<int32_t>{12, 11, 10}));
}

TEST(LutTables, MemoryIsFixedAndUnderOneMegabyteAtVocabulary8000) {
  LutTables t(8000, LutOptions{});
  const size_t bytes = t.memory_bytes();
  EXPECT_LT(bytes, 1u << 20);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> tok(0, 7999);
  std::vector<int32_t> history;
  for (int i = 0; i < 10000; ++i) {
    history.push_back(tok(rng));
    std::vector<int32_t> ids(8);
    for (int32_t& id : ids) id = tok(rng);
    t.update(history.data() + history.size(), static_cast<int64_t>(history.size()), ids,
             {0.3f, 0.2f, 0.1f, 0.1f, 0.1f, 0.05f, 0.05f, 0.05f});
    t.observe(history.data() + history.size(), static_cast<int64_t>(history.size()), tok(rng));
  }
  EXPECT_EQ(t.memory_bytes(), bytes) << "10,000 tokens later the tables hold the same memory";
  EXPECT_GT(t.rows_used(), 8000);
  // Siblings stay unique whatever was learnt.
  for (int i = 0; i < 200; ++i) {
    const std::vector<int32_t> ctx(history.end() - 3 - i, history.end() - i);
    const std::vector<int32_t> c = tokens_of(look(t, ctx));
    EXPECT_EQ(std::set<int32_t>(c.begin(), c.end()).size(), c.size());
  }
}

TEST(LutTables, SaveLoadAndRefusals) {
  TempDir dir;
  LutOptions o;
  o.slots = 32;
  LutTables t(100, o);
  update(t, {1, 2, 3}, {4, 5}, {0.7f, 0.2f});
  const std::string path = dir.str("lut.safetensors");
  t.save(path, "abc");
  const LutTables back = LutTables::load(path, 100, "abc");
  EXPECT_EQ(tokens_of(look(back, {1, 2, 3})), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(back.options().slots, 32);
  EXPECT_EQ(back.memory_bytes(), t.memory_bytes());
  // Either fingerprint empty: no check.
  EXPECT_NO_THROW(LutTables::load(path, 100, ""));
  auto refused = [&](const std::string& p, int64_t vocab, const std::string& fp, const std::string& what) {
    try {
      LutTables::load(p, vocab, fp);
      ADD_FAILURE() << "loaded; expected an error mentioning " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused(path, 99, "abc", "vocabulary of 100");
  refused(path, 100, "xyz", "tokenizer abc");
  refused(dir.str("missing.safetensors"), 100, "", "missing.json");
  // Malformed: a JSON that is not JSON, a truncated tensor file, an id out of range.
  const std::string json = read_file(dir.str("lut.json"));
  write_file(dir.str("lut.json"), "{not json");
  refused(path, 100, "", "not valid JSON");
  // Found by scripts/fuzz.sh: a float beyond an integer's range is refused,
  // not converted (undefined behaviour before).
  write_file(dir.str("lut.json"), R"({"format": "splitspec-lut", "vocab_size": 100, "k": 8, "order": 3e124, "slots": 32})");
  refused(path, 100, "", "order must be an integer");
  write_file(dir.str("lut.json"), R"({"format": "splitspec-lut", "vocab_size": 1.9e48, "k": 8, "order": 3, "slots": 32})");
  refused(path, 100, "", "vocab_size must be an integer");
  // Also found by fuzzing: the largest tables a sidecar may describe are
  // refused by the tensor file before any memory is taken for them.
  write_file(dir.str("lut.json"),
             R"({"format": "splitspec-lut", "vocab_size": 100, "k": 64, "order": 2, "slots": 16777216})");
  refused(path, 100, "", "expected I32 [100, 64]");
  write_file(dir.str("lut.json"), json);
  const std::string bytes = read_file(path);
  write_file(path, bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(LutTables::load(path, 100, ""), Error);
  std::string bad = bytes;
  write_file(path, bytes);
  const uint64_t at = SafetensorsFile(path).tensors().at("unigram.ids").file_offset;
  bad.replace(at, 4, "\x7f\x7f\x7f\x7f");  // the first unigram id becomes huge
  write_file(path, bad);
  refused(path, 100, "", "outside the vocabulary");
}

}  // namespace
}  // namespace splitspec::test

// The shipped demo pair (models/demo-target, models/demo-draft): it loads,
// shares one tokenizer, the target's forward is well over 5x the draft's in
// weights, greedy speculation with it reproduces the target exactly, and the
// target does not answer a prompt with <s>.
#include <gtest/gtest.h>

#include <filesystem>

#include "client/cli/prompts.h"
#include "common/drafting/model_drafter.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {
const std::filesystem::path kModels = std::filesystem::path(SPLITSPEC_SOURCE_DIR) / "models";
}

TEST(DemoPair, LoadsAndSharesOneTokenizer) {
  auto target = Model::load((kModels / "demo-target").string());
  auto draft = Model::load((kModels / "demo-draft").string());
  Tokenizer tt((kModels / "demo-target").string()), dt((kModels / "demo-draft").string());
  EXPECT_EQ(tt.fingerprint(), dt.fingerprint());
  EXPECT_EQ(target->config().vocab_size, draft->config().vocab_size);
  EXPECT_EQ(tt.vocab_size(), target->config().vocab_size);
  const int64_t tp = target->config().num_parameters(), dp = draft->config().num_parameters();
  EXPECT_GE(tp, 6'000'000);
  EXPECT_LE(tp, 12'000'000);
  EXPECT_GE(dp, 500'000);
  EXPECT_LE(dp, 2'000'000);
  EXPECT_GE(target->weight_bytes(), 5 * draft->weight_bytes());
}

TEST(DemoPair, GreedySpeculationReproducesTheTarget) {
  auto target = Model::load((kModels / "demo-target").string());
  auto draft = Model::load((kModels / "demo-draft").string());
  Tokenizer tok((kModels / "demo-target").string());
  GenerateOptions o;
  o.max_new_tokens = 48;
  o.ignore_eos = true;
  for (const char* prompt : {"The President of the United States", "Call me Ishmael. Some years ago",
                             "The committee said that the", "In the morning the ship"}) {
    std::vector<int32_t> ids = tok.encode(prompt);
    ids.insert(ids.begin(), 1);
    const auto reference = target_alone(*target, ids, o).output_ids;
    for (int gamma : {1, 2, 4, 8}) {
      ModelDrafter drafter(draft);
      EXPECT_EQ(decode_locally(target, drafter, ids, o, gamma).ids, reference) << prompt << " gamma " << gamma;
    }
  }
}

// The first demo target was trained on documents that each began with BOS
// but ran into the next one unseparated, so it learned that <s> follows text:
// it emitted <s> as its first token after 6 of the first 40 Spec-Bench
// prompts, three of which are below (Spec-Bench, Apache-2.0). tokenize_corpus
// now ends each document with EOS; the shipped target is trained that way.
TEST(DemoPair, TheTargetDoesNotAnswerWithBOS) {
  auto target = Model::load((kModels / "demo-target").string());
  Tokenizer tok((kModels / "demo-target").string());
  std::vector<std::string> prompts = {
      "Picture yourself as a 100-years-old tree in a lush forest, minding your own business, when suddenly, a bunch "
      "of deforesters shows up to chop you down. How do you feel when those guys start hacking away at you?",
      "Imagine you are participating in a race with a group of people. If you have just overtaken the second person, "
      "what's your current position? Where is the person you just overtook?",
      "David has three sisters. Each of them has one brother. How many brothers does David have?"};
  if (const auto shared = shared_dir()) {
    for (std::string& p : cli::read_prompts((*shared / "prompts" / "spec_bench.jsonl").string(), 40))
      prompts.push_back(std::move(p));
  } else {
    GTEST_LOG_(INFO) << "../shared absent: the 40 Spec-Bench prompts are skipped, the three above still run";
  }
  GenerateOptions o;
  o.max_new_tokens = 1;
  o.ignore_eos = true;
  const int32_t bos = static_cast<int32_t>(target->config().bos_token_id);
  const auto encoded = cli::encode_prompts(prompts, tok, target->config().max_position_embeddings - 1);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto out = target_alone(*target, encoded[i], o).output_ids;
    ASSERT_EQ(out.size(), 1u) << prompts[i];
    EXPECT_NE(out[0], bos) << prompts[i];
  }
}

}  // namespace splitspec::test

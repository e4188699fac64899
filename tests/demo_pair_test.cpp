// The shipped demo pair (models/demo-target, models/demo-draft): it loads,
// shares one tokenizer, the target's forward is well over 5x the draft's in
// weights, and greedy speculation with it reproduces the target exactly.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/drafting/model_drafter.h"
#include "common/engine/model.h"
#include "common/engine/tokenizer.h"
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

}  // namespace splitspec::test

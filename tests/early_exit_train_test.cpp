// Training early-exit adapters (LibTorch's optimiser: the integration
// tier): each exit's loss falls, the files land beside the model with the
// corpus's token ranking, and retraining keeps or replaces what is there.
#include <gtest/gtest.h>

#include <map>

#include "common/early_exit/early_exit.h"
#include "common/tokenizer/tokenizer.h"
#include "common/train/corpus.h"
#include "common/train/exit_trainer.h"
#include "tests/test_util.h"

namespace splitspec {
namespace {

using test::TempDir;

TEST(EarlyExits, TrainingLowersEachExitsLossAndWritesBesideTheModel) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 300; ++i) text += "The whale rose from the sea and the ship sailed on. Call me Ishmael.\n\n";
  test::write_file(dir.path() / "corpus.txt", text);
  ExitTrainJob job;
  job.target_dir = test::demo_target_dir();
  job.layers = "2,5";
  job.corpus = dir.str("corpus.txt");
  job.valid = dir.str("corpus.txt");
  job.out_dir = dir.str();
  job.steps = 12;
  job.batch = 2;
  job.seq_len = 32;
  job.bottleneck = 16;
  job.progress = false;
  const ExitTrainReport r = train_exits(job);
  ASSERT_EQ(r.last_losses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_LT(r.last_losses[i], r.first_losses[i]) << i;
  ASSERT_EQ(r.after.size(), 2u);
  EXPECT_EQ(r.after[1].after_layer, 5);
  EXPECT_GE(r.after[1].match_rate, 0.0);
  EXPECT_LE(r.after[1].match_rate, 1.0);
  auto model = Model::load(test::demo_target_dir());
  const auto back = EarlyExits::load(dir.str(), model->config());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->bottleneck(), 16);
  // The shortlist's ranking: every token of the corpus, most frequent first.
  const std::vector<int32_t> corpus = tokenize_corpus(job.corpus, Tokenizer(job.target_dir), 1);
  std::map<int32_t, int64_t> count;
  for (int32_t t : corpus) ++count[t];
  const std::vector<int32_t>& ranked = back->frequent_tokens();
  ASSERT_EQ(ranked.size(), count.size());
  for (size_t i = 1; i < ranked.size(); ++i) EXPECT_GE(count[ranked[i - 1]], count[ranked[i]]) << i;

  // Retraining one exit keeps the other, untouched; a different width
  // replaces them all, and says so.
  {
    std::string json = test::read_file(dir.path() / "early_exits.json");
    json.replace(json.find("\"bottleneck\""), 0, "\"serve_layers\": [5], ");
    test::write_file(dir.path() / "early_exits.json", json);
  }
  job.layers = "5";
  job.seed = 2;
  const ExitTrainReport again = train_exits(job);
  EXPECT_EQ(again.kept_layers, (std::vector<int64_t>{2}));
  EXPECT_TRUE(again.note.empty()) << again.note;
  const auto merged = EarlyExits::load(dir.str(), model->config());
  ASSERT_EQ(merged->adapters().size(), 2u);
  EXPECT_EQ(merged->adapters()[0].after_layer, 2);
  EXPECT_TRUE(merged->adapters()[0].up == back->adapters()[0].up);
  EXPECT_FALSE(merged->adapters()[1].up == back->adapters()[1].up);
  EXPECT_EQ(merged->serve_layers(), (std::vector<int64_t>{5}));
  job.bottleneck = 8;
  const ExitTrainReport wider = train_exits(job);
  EXPECT_TRUE(wider.kept_layers.empty());
  EXPECT_NE(wider.note.find("bottleneck 16"), std::string::npos) << wider.note;
  EXPECT_EQ(EarlyExits::load(dir.str(), model->config())->adapters().size(), 1u);
}

}  // namespace
}  // namespace splitspec

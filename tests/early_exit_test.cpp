// Early-exit adapters: storage, validation, training, and the verdicts the
// server streams from them.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "common/early_exit.h"
#include "common/early_verdict.h"
#include "common/error.h"
#include "common/train/exit_trainer.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

using test::TempDir;

using test::error_of;

TEST(EarlyExits, SaveLoadRoundTripAndBadFilesAreNamed) {
  TempDir dir;
  const ModelConfig c = test::tiny_config(50, 4);
  auto model = Model::random(c, 1);
  model->save(dir.str());
  EXPECT_FALSE(EarlyExits::load(dir.str(), c).has_value());
  EarlyExits e = EarlyExits::init(c, {1, 3}, 8, 7);
  e.adapters()[0].up.normal_();  // not the identity any more
  e.save(dir.str());
  const auto back = EarlyExits::load(dir.str(), c);
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->adapters().size(), 2u);
  EXPECT_EQ(back->adapters()[1].after_layer, 3);
  EXPECT_TRUE(at::equal(back->adapters()[0].up, e.adapters()[0].up));
  EXPECT_EQ(back->index_of(3), 1);
  EXPECT_EQ(back->index_of(2), -1);

  c10::InferenceMode guard;
  const at::Tensor h = at::randn({3, c.hidden_size});
  // The identity adapter is the plain LM head on the layer's hidden state.
  EXPECT_TRUE(at::allclose(back->logits(*model, 1, h), model->head_logits(h)));
  // A shortlist scores the first k ids exactly and rules out the rest.
  EarlyExits q = *back;
  q.set_shortlist(20);
  const at::Tensor full = back->logits(*model, 0, h), shortlisted = q.logits(*model, 0, h);
  EXPECT_TRUE(at::allclose(shortlisted.narrow(1, 0, 20), full.narrow(1, 0, 20)));
  EXPECT_TRUE(at::isinf(shortlisted.narrow(1, 20, 30)).all().item<bool>());

  EXPECT_NE(error_of([&] { EarlyExits::parse_layers("0", c); }).find("outside 1..3"), std::string::npos);
  EXPECT_NE(error_of([&] { EarlyExits::parse_layers("4", c); }).find("outside 1..3"), std::string::npos);
  EXPECT_NE(error_of([&] { EarlyExits::parse_layers("2,1", c); }).find("increasing"), std::string::npos);
  EXPECT_NE(error_of([&] { EarlyExits::parse_layers("x", c); }).find("not a layer count"), std::string::npos);
  EXPECT_EQ(EarlyExits::parse_layers("all", c), (std::vector<int64_t>{1, 2, 3}));

  test::write_file(dir.path() / "early_exits.json", "{\"after_layers\": [1], \"bottleneck\": 8, \"hidden_size\": 99}");
  EXPECT_NE(error_of([&] { EarlyExits::load(dir.str(), c); }).find("hidden_size 99"), std::string::npos);
  test::write_file(dir.path() / "early_exits.json", "{\"after_layers\": [2], \"bottleneck\": 8, \"hidden_size\": 32}");
  EXPECT_NE(error_of([&] { EarlyExits::load(dir.str(), c); }).find("exits.2.norm.weight' missing"), std::string::npos);
  test::write_file(dir.path() / "early_exits.json", "{\"after_layers\": ");
  EXPECT_NE(error_of([&] { EarlyExits::load(dir.str(), c); }).find("not valid JSON"), std::string::npos);
  std::filesystem::remove(dir.path() / "early_exits.json");
  EXPECT_NE(error_of([&] { EarlyExits::load(dir.str(), c); }).find("early_exits.json: missing"), std::string::npos);
}

// Where the exit's logits are the final layer's, the early verdict is the
// final verdict, sampling included (it draws the same uniforms).
TEST(EarlyExits, VerdictAtAnExitThatAgreesIsTheFinalVerdict) {
  c10::InferenceMode guard;
  const ModelConfig c = test::tiny_config(12, 2);
  auto model = Model::random(c, 3);
  EarlyExits e = EarlyExits::init(c, {1}, 4, 1);
  const at::Tensor h = at::randn({4, c.hidden_size}) * 3;
  const at::Tensor logits = e.logits(*model, 0, h);
  DraftTree tree = DraftTree::chain({int32_t(logits[0].argmax().item<int64_t>()), 5, 6});
  SamplingParams greedy;
  Rng r1(9);
  const Verdict want = verify_tree(tree, logits, greedy, r1);
  const EarlyVerdict got = verify_at_exit(*model, e, 0, h, tree, greedy, Rng(9));
  EXPECT_EQ(got.verdict.tokens, want.tokens);
  EXPECT_GE(got.verdict.accepted, 1);
  EXPECT_GT(got.confidence, 0.0);
  EXPECT_LE(got.confidence, 1.0);
  EXPECT_EQ(got.after_layer, 1);

  SamplingParams sampled;
  sampled.temperature = 1.0f;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<Distribution> q(3, Distribution(12, 1.0f / 12));
    DraftTree t = DraftTree::chain({1, 2, 3}, q);
    Rng a(seed);
    const Verdict v = verify_tree(t, logits, sampled, a);
    EXPECT_EQ(verify_at_exit(*model, e, 0, h, t, sampled, Rng(seed)).verdict.tokens, v.tokens) << seed;
  }
}

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
}

}  // namespace
}  // namespace splitspec

namespace splitspec {
namespace {

TEST(EarlyExitsCli, EvalPrintsTheTableAndDrawsThePlot) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 200; ++i) text += "It was the best of times, it was the worst of times.\n\n";
  test::write_file(dir.path() / "text.txt", text);
  const std::string out = dir.str("out.txt"), err = dir.str("err.txt"), svg = dir.str("exits.svg");
  const std::string cmd = std::string(SPLITSPEC_BIN_DIR) + "/splitspec eval exits --model " + test::demo_target_dir() +
                          " --text " + dir.str("text.txt") + " --seq-len 64 --windows 4 --threads 1 --plot " + svg +
                          " >" + out + " 2>" + err;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << test::read_file(err);
  const std::string table = test::read_file(out);
  for (int l = 1; l <= 7; ++l) EXPECT_NE(table.find("| " + std::to_string(l) + " of 8 |"), std::string::npos) << table;
  const std::string plot = test::read_file(svg);
  EXPECT_EQ(plot.rfind("<svg", 0), 0u);
  EXPECT_NE(plot.find("match rate"), std::string::npos);
  // A model without exits is a clear error.
  TempDir bare;
  Model::random(test::tiny_config(), 1)->save(bare.str());
  const std::string bad = std::string(SPLITSPEC_BIN_DIR) + "/splitspec eval exits --model " + bare.str() + " --text " +
                          dir.str("text.txt") + " >/dev/null 2>" + err;
  EXPECT_NE(std::system(bad.c_str()), 0);
  EXPECT_NE(test::read_file(err).find("no early_exits.json"), std::string::npos) << test::read_file(err);
}

}  // namespace
}  // namespace splitspec

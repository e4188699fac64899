// Early-exit adapters: storage, validation, training, and the verdicts the
// server streams from them.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "common/backend/cpu_backend.h"
#include "common/early_exit/early_exit.h"
#include "common/early_exit/early_verdict.h"
#include "common/util/error.h"
#include "common/train/corpus.h"
#include "common/train/exit_trainer.h"
#include "tests/edge_cloud_util.h"
#include "tests/torch_test_util.h"

namespace splitspec {
namespace {

using test::TempDir;

using test::error_of;
using test::T;
using test::verify_tree;
using test::view;

TEST(EarlyExits, SaveLoadRoundTripAndBadFilesAreNamed) {
  TempDir dir;
  const ModelConfig c = test::tiny_config(50, 4);
  auto model = Model::random(c, 1);
  const CpuBackend cpu(*model);
  model->save(dir.str());
  EXPECT_FALSE(EarlyExits::load(dir.str(), c).has_value());
  EarlyExits e = init_exits(c, {1, 3}, 8, 7);
  for (size_t i = 0; i < e.adapters()[0].up.size(); ++i)  // not the identity any more
    e.adapters()[0].up[i] = 0.1f * static_cast<float>(std::sin(static_cast<double>(i)));
  e.save(dir.str());
  const auto back = EarlyExits::load(dir.str(), c);
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->adapters().size(), 2u);
  EXPECT_EQ(back->adapters()[1].after_layer, 3);
  EXPECT_TRUE(back->adapters()[0].up == e.adapters()[0].up);
  EXPECT_EQ(back->index_of(3), 1);
  EXPECT_EQ(back->index_of(2), -1);

  c10::InferenceMode guard;
  const at::Tensor h = at::randn({3, c.hidden_size});
  // The identity adapter is the plain LM head on the layer's hidden state.
  EXPECT_TRUE(at::allclose(T(back->logits(cpu, 1, view(h))), T(model->head_logits(view(h)))));
  // A shortlist scores the k most frequent tokens (with its LM-head rows in
  // half precision, so to about 1e-3) and rules out the rest; the ranking
  // survives a save and load.
  EarlyExits q = *back;
  q.set_shortlist(cpu, 3);
  EXPECT_EQ(q.shortlist(), 0) << "no ranking: the whole vocabulary";
  std::vector<int32_t> ranked;
  for (int32_t i = 0; i < 20; ++i) ranked.push_back((i * 7 + 5) % c.vocab_size);
  q.set_frequent_tokens(ranked, c.vocab_size);
  q.save(dir.str());
  q = *EarlyExits::load(dir.str(), c);
  EXPECT_EQ(q.frequent_tokens(), ranked);
  q.set_shortlist(cpu, 12);
  EXPECT_EQ(q.shortlist(), 12);
  const at::Tensor full = T(back->logits(cpu, 0, view(h))), shortlisted = T(q.logits(cpu, 0, view(h)));
  std::vector<bool> in(static_cast<size_t>(c.vocab_size), false);
  for (int i = 0; i < 12; ++i) in[static_cast<size_t>(ranked[i])] = true;
  for (int64_t t = 0; t < c.vocab_size; ++t) {
    if (in[static_cast<size_t>(t)])
      EXPECT_TRUE(at::allclose(shortlisted.select(1, t), full.select(1, t), 1e-2, 1e-2)) << t;
    else
      EXPECT_TRUE(at::isinf(shortlisted.select(1, t)).all().item<bool>()) << t;
  }
  q.set_frequent_tokens(ranked, c.vocab_size);
  EXPECT_EQ(q.shortlist(), 0) << "a new ranking drops the shortlist drawn from the old";
  q.set_shortlist(cpu, 20);
  EXPECT_EQ(q.shortlist(), 0) << "as many as ranked: the whole vocabulary";
  EXPECT_NE(error_of([&] { q.set_frequent_tokens({1, 2, 1}, c.vocab_size); }).find("id 1 repeated"), std::string::npos);
  EXPECT_NE(error_of([&] { q.set_frequent_tokens({static_cast<int32_t>(c.vocab_size)}, c.vocab_size); }).find("outside the vocabulary"),
            std::string::npos);

  EXPECT_NE(error_of([&] { EarlyExits::parse_layers("0", c); }).find("outside 1..3"), std::string::npos);
  EXPECT_NE(error_of([&] { EarlyExits::parse_layers("4", c); }).find("outside 1..3"), std::string::npos);
  EXPECT_NE(error_of([&] { EarlyExits::parse_layers("2,1", c); }).find("increasing"), std::string::npos);
  EXPECT_NE(error_of([&] { EarlyExits::parse_layers("x", c); }).find("not a layer count"), std::string::npos);
  EXPECT_EQ(EarlyExits::parse_layers("all", c), (std::vector<int64_t>{1, 2, 3}));
  EarlyExits narrow = init_exits(c, {2}, 4, 1);
  EXPECT_NE(error_of([&] { narrow.keep_missing_from(*back); }).find("cannot join"), std::string::npos);

  test::write_file(dir.path() / "early_exits.json", "{\"after_layers\": [1], \"bottleneck\": 8, \"hidden_size\": 99}");
  EXPECT_NE(error_of([&] { EarlyExits::load(dir.str(), c); }).find("hidden_size 99"), std::string::npos);
  test::write_file(dir.path() / "early_exits.json", "{\"after_layers\": [2], \"bottleneck\": 8, \"hidden_size\": 32}");
  EXPECT_NE(error_of([&] { EarlyExits::load(dir.str(), c); }).find("exits.2.norm.weight' missing"), std::string::npos);
  test::write_file(dir.path() / "early_exits.json",
                   "{\"after_layers\": [1, 3], \"bottleneck\": 8, \"hidden_size\": 32, \"frequent_tokens\": [-1]}");
  EXPECT_NE(error_of([&] { EarlyExits::load(dir.str(), c); }).find("outside the vocabulary"), std::string::npos);
  // Found by scripts/fuzz.sh: floats beyond an integer's range are refused,
  // not converted (undefined behaviour before).
  test::write_file(dir.path() / "early_exits.json", "{\"after_layers\": [1e300], \"bottleneck\": 8, \"hidden_size\": 32}");
  EXPECT_NE(error_of([&] { EarlyExits::load(dir.str(), c); }).find("after_layers must be an integer"), std::string::npos);
  test::write_file(dir.path() / "early_exits.json", "{\"after_layers\": [1], \"bottleneck\": 1e19, \"hidden_size\": 32}");
  EXPECT_NE(error_of([&] { EarlyExits::load(dir.str(), c); }).find("bottleneck must be an integer"), std::string::npos);
  test::write_file(dir.path() / "early_exits.json",
                   "{\"after_layers\": [1], \"bottleneck\": 8, \"hidden_size\": 32, \"frequent_tokens\": [3.9e71]}");
  EXPECT_NE(error_of([&] { EarlyExits::load(dir.str(), c); }).find("frequent_tokens must be an integer"), std::string::npos);
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
  const CpuBackend cpu(*model);
  EarlyExits e = init_exits(c, {1}, 4, 1);
  const at::Tensor h = at::randn({4, c.hidden_size}) * 3;
  const at::Tensor logits = T(e.logits(cpu, 0, view(h)));
  DraftTree tree = DraftTree::chain({int32_t(logits[0].argmax().item<int64_t>()), 5, 6});
  SamplingParams greedy;
  Rng r1(9);
  const Verdict want = verify_tree(tree, logits, greedy, r1);
  const EarlyVerdict got = verify_at_exit(cpu, e, 0, view(h), tree, greedy, Rng(9));
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
    EXPECT_EQ(verify_at_exit(cpu, e, 0, view(h), t, sampled, Rng(seed)).verdict.tokens, v.tokens) << seed;
  }
}

// Greedy exits decide on their shortlist's scores alone; verdict and
// confidence are those the vocabulary-wide logits give, for chains and trees,
// with and without a shortlist.
TEST(EarlyExits, GreedyVerdictFromShortlistScoresIsTheVerdictOfTheFullLogits) {
  c10::InferenceMode guard;
  const ModelConfig c = test::tiny_config(12, 2);
  auto model = Model::random(c, 5);
  const CpuBackend cpu(*model);
  EarlyExits e = init_exits(c, {1}, 4, 2);
  e.set_frequent_tokens({7, 3, 11, 0, 5, 9, 1, 2, 4, 6, 8, 10}, c.vocab_size);
  const SamplingParams greedy;
  for (int64_t shortlist : {0, 5}) {
    e.set_shortlist(cpu, shortlist);
    ASSERT_EQ(e.shortlist(), shortlist);
    for (int64_t seed = 0; seed < 30; ++seed) {
      at::manual_seed(seed);
      const at::Tensor h = at::randn({4, c.hidden_size}) * 3;
      const at::Tensor logits = T(e.logits(cpu, 0, view(h)));
      // Children that the exit's argmax will accept, some of the time.
      const int32_t top0 = static_cast<int32_t>(logits[0].argmax().item<int64_t>());
      const int32_t top1 = static_cast<int32_t>(logits[1].argmax().item<int64_t>());
      DraftTree tree;
      tree.tokens = {seed % 2 ? top0 : 1, seed % 3 ? 2 : top0, top1};
      tree.parents = {-1, -1, seed % 2 ? 0 : 1};
      Rng rng(1);
      const Verdict want = verify_tree(tree, logits, greedy, rng);
      std::vector<int64_t> decided{0};
      for (int32_t node : want.path) decided.push_back(node + 1);
      const double want_conf = std::get<0>(at::softmax(logits.index_select(0, at::tensor(decided)), -1).max(-1))
                                   .prod()
                                   .item<double>();
      const EarlyVerdict got = verify_at_exit(cpu, e, 0, view(h), tree, greedy, Rng(1));
      EXPECT_EQ(got.verdict.tokens, want.tokens) << shortlist << " " << seed;
      EXPECT_EQ(got.verdict.path, want.path) << shortlist << " " << seed;
      EXPECT_EQ(got.verdict.accepted, want.accepted);
      EXPECT_NEAR(got.confidence, want_conf, 1e-5 * want_conf) << shortlist << " " << seed;
    }
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

// Exits trained before they carried a ranking get one from the CLI, adapters
// untouched; a model without exits is a clear error.
TEST(EarlyExitsCli, ShortlistRanksTheVocabularyOfExistingExits) {
  TempDir dir, target;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.model", "early_exits.safetensors"})
    std::filesystem::copy_file(std::filesystem::path(test::demo_target_dir()) / f, target.path() / f);
  auto model = Model::load(test::demo_target_dir());
  EarlyExits plain = *EarlyExits::load(test::demo_target_dir(), model->config());
  plain.set_frequent_tokens({}, model->config().vocab_size);
  plain.save(target.str());
  std::string text;
  for (int i = 0; i < 50; ++i) text += "Call me Ishmael. Some years ago, never mind how long precisely.\n\n";
  test::write_file(dir.path() / "text.txt", text);
  const std::string bin = std::string(SPLITSPEC_BIN_DIR) + "/splitspec train shortlist --corpus " + dir.str("text.txt");
  const std::string out = dir.str("out.txt"), err = dir.str("err.txt");
  ASSERT_EQ(std::system((bin + " --target " + target.str() + " >" + out + " 2>" + err).c_str()), 0) << test::read_file(err);
  EXPECT_NE(test::read_file(out).find("ranked"), std::string::npos);
  const auto back = EarlyExits::load(target.str(), model->config());
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(back->frequent_tokens().empty());
  EXPECT_TRUE(back->adapters()[2].up == plain.adapters()[2].up);

  TempDir bare;
  Model::random(test::tiny_config(), 1)->save(bare.str());
  EXPECT_NE(std::system((bin + " --target " + bare.str() + " >/dev/null 2>" + err).c_str()), 0);
  EXPECT_NE(test::read_file(err).find("no early_exits.json"), std::string::npos) << test::read_file(err);
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

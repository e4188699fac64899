// Early-exit adapters: storage, validation, and the verdicts the server
// streams from them (early_exit_train_test.cpp trains them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "common/backend/cpu_backend.h"
#include "common/early_exit/early_exit.h"
#include "common/early_exit/early_verdict.h"
#include "common/util/error.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace splitspec {
namespace {

using test::TempDir;

using test::error_of;

// Fresh exits as exit_trainer.h's init_exits makes them (its generator is
// LibTorch's, these are a std::mt19937's): unit gains, random down
// projections and zero up projections, so that each exit is the plain LM
// head on its layer's hidden state.
EarlyExits fresh_exits(const ModelConfig& c, const std::vector<int64_t>& after_layers, int64_t bottleneck,
                       uint64_t seed) {
  std::mt19937 engine(static_cast<std::mt19937::result_type>(seed));
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(c.hidden_size)));
  std::vector<ExitAdapter> adapters;
  for (int64_t l : after_layers) {
    ExitAdapter a;
    a.after_layer = l;
    a.norm.assign(static_cast<size_t>(c.hidden_size), 1.0f);
    a.down.resize(static_cast<size_t>(bottleneck * c.hidden_size));
    for (float& x : a.down) x = normal(engine);
    a.up.assign(static_cast<size_t>(c.hidden_size * bottleneck), 0.0f);
    adapters.push_back(std::move(a));
  }
  return EarlyExits(std::move(adapters), bottleneck);
}

// Column `t` of `m`.
std::vector<float> column(const Rows& m, int64_t t) {
  std::vector<float> c;
  for (int64_t r = 0; r < m.rows(); ++r) c.push_back(m.row(r)[t]);
  return c;
}

TEST(EarlyExits, SaveLoadRoundTripAndBadFilesAreNamed) {
  TempDir dir;
  const ModelConfig c = test::tiny_config(50, 4);
  auto model = Model::random(c, 1);
  const CpuBackend cpu(*model);
  model->save(dir.str());
  EXPECT_FALSE(EarlyExits::load(dir.str(), c).has_value());
  EarlyExits e = fresh_exits(c, {1, 3}, 8, 7);
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

  const std::vector<float> values = test::randn(3 * c.hidden_size, 11);
  const RowsView h{values.data(), 3, c.hidden_size};
  // The identity adapter is the plain LM head on the layer's hidden state.
  EXPECT_TRUE(test::all_close(back->logits(cpu, 1, h), model->head_logits(h)));
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
  const Rows full = back->logits(cpu, 0, h), shortlisted = q.logits(cpu, 0, h);
  std::vector<bool> in(static_cast<size_t>(c.vocab_size), false);
  for (int i = 0; i < 12; ++i) in[static_cast<size_t>(ranked[i])] = true;
  for (int64_t t = 0; t < c.vocab_size; ++t) {
    const std::vector<float> scored = column(shortlisted, t);
    if (in[static_cast<size_t>(t)])
      EXPECT_TRUE(test::all_close(test::as_row(scored), test::as_row(column(full, t)), 1e-2, 1e-2)) << t;
    else
      EXPECT_TRUE(std::all_of(scored.begin(), scored.end(), [](float x) { return std::isinf(x); })) << t;
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
  EarlyExits narrow = fresh_exits(c, {2}, 4, 1);
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
  const ModelConfig c = test::tiny_config(12, 2);
  auto model = Model::random(c, 3);
  const CpuBackend cpu(*model);
  EarlyExits e = fresh_exits(c, {1}, 4, 1);
  const std::vector<float> values = test::randn(4 * c.hidden_size, 12, 3.0f);
  const RowsView h{values.data(), 4, c.hidden_size};
  const Rows logits = e.logits(cpu, 0, h);
  DraftTree tree = DraftTree::chain({greedy_token(logits.row(0), logits.cols()), 5, 6});
  SamplingParams greedy;
  Rng r1(9);
  const Verdict want = verify_tree(tree, logits, greedy, r1);
  const EarlyVerdict got = verify_at_exit(cpu, e, 0, h, tree, greedy, Rng(9));
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
    EXPECT_EQ(verify_at_exit(cpu, e, 0, h, t, sampled, Rng(seed)).verdict.tokens, v.tokens) << seed;
  }
}

// Greedy exits decide on their shortlist's scores alone; verdict and
// confidence are those the vocabulary-wide logits give, for chains and trees,
// with and without a shortlist.
TEST(EarlyExits, GreedyVerdictFromShortlistScoresIsTheVerdictOfTheFullLogits) {
  const ModelConfig c = test::tiny_config(12, 2);
  auto model = Model::random(c, 5);
  const CpuBackend cpu(*model);
  EarlyExits e = fresh_exits(c, {1}, 4, 2);
  e.set_frequent_tokens({7, 3, 11, 0, 5, 9, 1, 2, 4, 6, 8, 10}, c.vocab_size);
  const SamplingParams greedy;
  for (int64_t shortlist : {0, 5}) {
    e.set_shortlist(cpu, shortlist);
    ASSERT_EQ(e.shortlist(), shortlist);
    for (int64_t seed = 0; seed < 30; ++seed) {
      const std::vector<float> values = test::randn(4 * c.hidden_size, static_cast<uint64_t>(seed), 3.0f);
      const RowsView h{values.data(), 4, c.hidden_size};
      const Rows logits = e.logits(cpu, 0, h);
      // Children that the exit's argmax will accept, some of the time.
      const int32_t top0 = greedy_token(logits.row(0), logits.cols());
      const int32_t top1 = greedy_token(logits.row(1), logits.cols());
      DraftTree tree;
      tree.tokens = {seed % 2 ? top0 : 1, seed % 3 ? 2 : top0, top1};
      tree.parents = {-1, -1, seed % 2 ? 0 : 1};
      Rng rng(1);
      const Verdict want = verify_tree(tree, logits, greedy, rng);
      // The product of the top probabilities of the rows that decided.
      std::vector<int64_t> decided{0};
      for (int32_t node : want.path) decided.push_back(node + 1);
      double want_conf = 1.0;
      for (int64_t row : decided) {
        const std::vector<double> p = test::reference_softmax(logits.row(row), logits.cols());
        want_conf *= *std::max_element(p.begin(), p.end());
      }
      const EarlyVerdict got = verify_at_exit(cpu, e, 0, h, tree, greedy, Rng(1));
      EXPECT_EQ(got.verdict.tokens, want.tokens) << shortlist << " " << seed;
      EXPECT_EQ(got.verdict.path, want.path) << shortlist << " " << seed;
      EXPECT_EQ(got.verdict.accepted, want.accepted);
      EXPECT_NEAR(got.confidence, want_conf, 1e-5 * want_conf) << shortlist << " " << seed;
    }
  }
}

}  // namespace
}  // namespace splitspec

// Edge-cloud decoding over real gRPC on loopback: every mode reproduces the
// target alone.
#include <gtest/gtest.h>

#include "client/client.h"
#include "client/request_options.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

using test::LocalServer;
using test::TempDir;

ClientOptions edge_options(const std::string& address, const std::string& draft_dir) {
  ClientOptions o;
  o.mode = Mode::kEdgeSd;
  o.server = address;
  o.draft_dir = draft_dir;
  return o;
}

TEST(EdgeCloud, EdgeSdGreedyMatchesTargetAloneOnManyPromptsAndEveryGamma) {
  LocalServer srv = test::start_server(test::demo_target_dir());
  auto target = Model::load(test::demo_target_dir());
  Tokenizer tok(test::demo_target_dir());
  auto client = Client::connect(edge_options(srv.address, test::demo_draft_dir()));
  Request req;
  req.max_new_tokens = 40;
  req.ignore_eos = true;
  int64_t rounds = 0, tokens = 0;
  for (const std::string& text : test::test_prompts()) {
    const std::vector<int32_t> prompt = test::encode_prompt(tok, text);
    const test::Reference want = test::target_alone(*target, prompt, to_generate_options(req));
    for (int32_t gamma = 1; gamma <= 8; ++gamma) {
      req.gamma = gamma;
      const Result got = client->generate_ids(prompt, req);
      ASSERT_EQ(got.ids, want.output_ids) << "prompt '" << text << "' gamma " << gamma;
      EXPECT_EQ(got.finish_reason, "length");
      rounds += got.stats.rounds;
      tokens += got.stats.new_tokens;
    }
  }
  // Speculation really happened: fewer rounds than tokens.
  EXPECT_LT(rounds, tokens);
  EXPECT_TRUE(test::wait_until([&] { return srv.server->active_sessions() == 0; }, std::chrono::seconds(10)));
}

// A draft that is often wrong exercises rejection at every position, and a
// budget past the context exercises the context stop.
TEST(EdgeCloud, EdgeSdGreedyMatchesTargetWithAPoorDraftAndAtTheContextEnd) {
  TempDir dir;
  Model::random(test::tiny_config(64, 2), 11)->save(dir.str("target"));
  Model::random(test::tiny_config(64, 1), 12)->save(dir.str("draft"));
  LocalServer srv = test::start_server(dir.str("target"));
  auto target = Model::load(dir.str("target"));
  auto client = Client::connect(edge_options(srv.address, dir.str("draft")));
  int64_t proposed_rounds = 0, rejected_somewhere = 0;
  for (int p = 0; p < 6; ++p) {
    std::vector<int32_t> prompt = {1};
    for (int i = 0; i < p + 2; ++i) prompt.push_back(3 + (p * 7 + i * 5) % 60);
    for (int32_t gamma : {1, 2, 3, 5, 8}) {
      Request req;
      req.gamma = gamma;
      req.ignore_eos = true;
      req.max_new_tokens = p == 5 ? 200 : 30;  // the last prompt runs into the context's end
      const test::Reference want = test::target_alone(*target, prompt, to_generate_options(req));
      const Result got = client->generate_ids(prompt, req);
      ASSERT_EQ(got.ids, want.output_ids) << "prompt " << p << " gamma " << gamma;
      EXPECT_EQ(got.finish_reason, want.finish_reason);
      proposed_rounds += got.stats.rounds;
      if (got.stats.acceptance_rate < 1.0) rejected_somewhere += 1;
    }
  }
  EXPECT_GT(rejected_somewhere, 0);
  EXPECT_GT(proposed_rounds, 0);
}

TEST(EdgeCloud, CloudArEqualsLocalArGreedyAndSampled) {
  LocalServer srv = test::start_server(test::demo_target_dir());
  auto target = Model::load(test::demo_target_dir());
  ClientOptions o;
  o.mode = Mode::kCloudAr;
  o.server = srv.address;
  o.tokenizer = test::demo_target_dir();
  auto client = Client::connect(o);
  for (float temperature : {0.0f, 0.9f}) {
    for (int p = 0; p < 4; ++p) {
      Request req;
      req.max_new_tokens = 32;
      req.temperature = temperature;
      req.top_k = temperature > 0 ? 50 : 0;
      req.seed = 100 + p;
      std::string text;
      const Result got = client->generate(test::test_prompts()[p], req, [&](const std::string& piece) { text += piece; });
      const test::Reference want = test::target_alone(*target, got.prompt_ids, to_generate_options(req));
      ASSERT_EQ(got.ids, want.output_ids) << "prompt " << p << " temperature " << temperature;
      EXPECT_EQ(got.finish_reason, want.finish_reason);
      EXPECT_EQ(text, got.text) << "streamed text equals the decoded ids";
      EXPECT_EQ(got.stats.target_forwards, static_cast<int64_t>(got.ids.size()));
    }
  }
}

// The first two emitted tokens of sampled edge-sd, over many seeds, against
// the target's own distributions: the first token's p, and the second
// token's marginal sum_x p(x) p(.|x).
TEST(EdgeCloud, SampledEdgeSdHasTheTargetsDistribution) {
  TempDir dir;
  constexpr int64_t kVocab = 12;
  Model::random(test::tiny_config(kVocab, 2), 21)->save(dir.str("target"));
  Model::random(test::tiny_config(kVocab, 1), 22)->save(dir.str("draft"));
  LocalServer srv = test::start_server(dir.str("target"));
  auto client = Client::connect(edge_options(srv.address, dir.str("draft")));
  auto target = Model::load(dir.str("target"));
  const std::vector<int32_t> prompt = {1, 5, 7};
  Request req;
  req.max_new_tokens = 2;
  req.ignore_eos = true;
  req.gamma = 3;
  req.temperature = 0.05f;  // random weights give flat logits: sharpen them
  constexpr int kDraws = 3000;
  double acceptance = 0;
  test::expect_targets_two_token_distribution(*client, *target, prompt, req, kDraws, 1000, [&](const Result& r) {
    EXPECT_EQ(r.ids.size(), 2u);
    acceptance += r.stats.acceptance_rate;
  });
  acceptance /= kDraws;
  // Both accepting and rejecting paths are exercised.
  EXPECT_GT(acceptance, 0.05);
  EXPECT_LT(acceptance, 0.95);
}

}  // namespace
}  // namespace splitspec

// EdgeLLM's width-adaptive token trees verified by the server over real gRPC
// (--verifier server --drafter model-tree): exactly the target alone, greedy
// token for token and sampled in distribution, with and without
// pre-drafting, down to the context's end.
#include <gtest/gtest.h>

#include "client/client.h"
#include "client/request_options.h"
#include "common/early_exit/early_exit.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/train/exit_trainer.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

using test::LocalServer;
using test::TempDir;

ClientOptions tree_options(const std::string& address, const std::string& draft_dir, bool predraft = false) {
  ClientOptions o;
  o.verifier = VerifierKind::kServer;
  o.drafter = "model-tree";
  o.predraft = predraft;
  o.server = address;
  o.draft_dir = draft_dir;
  return o;
}

TEST(EdgeTree, GreedyMatchesTargetAloneOnManyPromptsWithAndWithoutPredrafting) {
  LocalServer srv = test::start_server(test::demo_target_dir());
  auto target = Model::load(test::demo_target_dir());
  Tokenizer tok(test::demo_target_dir());
  auto tree = Client::connect(tree_options(srv.address, test::demo_draft_dir()));
  auto tree_fsd = Client::connect(tree_options(srv.address, test::demo_draft_dir(), true));
  Request req;
  req.max_new_tokens = 40;
  req.ignore_eos = true;
  int64_t rounds = 0, tokens = 0, branched = 0, hits = 0;
  for (const std::string& text : test::test_prompts()) {
    const std::vector<int32_t> prompt = test::encode_prompt(tok, text);
    const test::Reference want = test::target_alone(*target, prompt, to_generate_options(req));
    const Result got = tree->generate_ids(prompt, req);
    ASSERT_EQ(got.ids, want.output_ids) << "server+model-tree, '" << text << "'";
    EXPECT_LE(got.stats.tree_nodes, 16.0) << "the server's max_draft_tokens caps a tree";
    rounds += got.stats.rounds;
    tokens += got.stats.new_tokens;
    branched += got.stats.branched_trees;
    const Result fsd = tree_fsd->generate_ids(prompt, req);
    ASSERT_EQ(fsd.ids, want.output_ids) << "server+model-tree+predraft, '" << text << "'";
    hits += fsd.stats.predraft_hits;
  }
  EXPECT_LT(rounds, tokens) << "rounds accept drafted tokens";
  EXPECT_GT(branched, 0) << "trees went over the wire, not only chains";
  EXPECT_GT(hits, 0) << "pre-drafted trees were used";
  EXPECT_TRUE(test::wait_until([&] { return srv.server->active_sessions() == 0; }, std::chrono::seconds(10)));
}

// A draft that is often wrong exercises rejection everywhere in the tree, and
// a budget past the context makes the last trees shrink to fit.
TEST(EdgeTree, GreedyMatchesTargetWithAPoorDraftAndAtTheContextEnd) {
  TempDir dir;
  Model::random(test::tiny_config(64, 2), 11)->save(dir.str("target"));
  Model::random(test::tiny_config(64, 1), 12)->save(dir.str("draft"));
  LocalServer srv = test::start_server(dir.str("target"));
  auto target = Model::load(dir.str("target"));
  ClientOptions o = tree_options(srv.address, dir.str("draft"));
  o.drafter_options["max_children"] = "3";
  auto client = Client::connect(o);
  int64_t branched = 0;
  for (int p = 0; p < 6; ++p) {
    std::vector<int32_t> prompt = {1};
    for (int i = 0; i < p + 2; ++i) prompt.push_back(3 + (p * 7 + i * 5) % 60);
    Request req;
    req.ignore_eos = true;
    req.max_new_tokens = p >= 4 ? 200 : 30;  // the last prompts run into the context's end
    const test::Reference want = test::target_alone(*target, prompt, to_generate_options(req));
    const Result got = client->generate_ids(prompt, req);
    ASSERT_EQ(got.ids, want.output_ids) << "prompt " << p;
    EXPECT_EQ(got.finish_reason, want.finish_reason);
    branched += got.stats.branched_trees;
  }
  EXPECT_GT(branched, 0);
}

// The first two emitted tokens over many seeds against the target's own
// distributions; sampled siblings are independent draws from their parent's
// q, which the server verifies SpecInfer-style.
TEST(EdgeTree, SampledOutputHasTheTargetsDistribution) {
  TempDir dir;
  constexpr int64_t kVocab = 12;
  const ModelConfig tc = test::tiny_config(kVocab, 2);
  Model::random(tc, 21)->save(dir.str("target"));
  Model::random(test::tiny_config(kVocab, 1), 22)->save(dir.str("draft"));
  LocalServer srv = test::start_server(dir.str("target"));
  ClientOptions o = tree_options(srv.address, dir.str("draft"));
  o.drafter_options["max_nodes"] = "6";
  o.drafter_options["alpha"] = "0.05";
  auto client = Client::connect(o);
  auto target = Model::load(dir.str("target"));
  const std::vector<int32_t> prompt = {1, 5, 7};
  Request req;
  req.max_new_tokens = 2;
  req.ignore_eos = true;
  req.temperature = 0.05f;  // random weights give flat logits: sharpen them
  constexpr int kDraws = 3000;
  int64_t branched = 0, rounds = 0, accepted = 0;
  test::expect_targets_two_token_distribution(*client, *target, prompt, req, kDraws, 7000, [&](const Result& r) {
    EXPECT_EQ(r.ids.size(), 2u);
    branched += r.stats.branched_trees;
    rounds += r.stats.rounds;
    accepted += static_cast<int64_t>(r.stats.accepted_per_round * static_cast<double>(r.stats.rounds) + 0.5);
  });
  EXPECT_GT(branched, kDraws / 10) << "sampled trees should branch";
  EXPECT_GT(accepted, 0) << "drafts should be accepted sometimes";
  EXPECT_LT(accepted, 2 * rounds) << "and rejected sometimes";
}

TEST(EdgeTree, SampledWithPredraftingHasTheTargetsDistribution) {
  TempDir dir;
  constexpr int64_t kVocab = 12;
  const ModelConfig tc = test::tiny_config(kVocab, 3);
  Model::random(tc, 31)->save(dir.str("target"));
  init_exits(tc, {1, 2}, 8, 5).save(dir.str("target"));
  Model::random(test::tiny_config(kVocab, 1), 32)->save(dir.str("draft"));
  LocalServer srv = test::start_server(dir.str("target"));
  ClientOptions o = tree_options(srv.address, dir.str("draft"), true);
  o.drafter_options["max_nodes"] = "3";
  auto client = Client::connect(o);
  auto target = Model::load(dir.str("target"));
  const std::vector<int32_t> prompt = {1, 4, 9};
  Request req;
  req.max_new_tokens = 3;
  req.ignore_eos = true;
  req.temperature = 0.05f;
  int64_t hits = 0;
  test::expect_targets_two_token_distribution(*client, *target, prompt, req, 3000, 9000, [&](const Result& r) {
    EXPECT_EQ(r.ids.size(), 3u);
    hits += r.stats.predraft_hits;
  });
  EXPECT_GT(hits, 100) << "pre-drafted trees must be part of what is tested";
}

}  // namespace
}  // namespace splitspec

// ReDrafter's recurrent drafter end to end through the local verifier (in
// memory and streamed) and over real gRPC with no draft model on the client,
// and training its head (LibTorch's optimiser: this tier, not the unit one,
// where recurrent_head_test.cpp checks the head itself).
#include <gtest/gtest.h>

#include <filesystem>

#include "client/client.h"
#include "common/drafting/recurrent_head.h"
#include "common/early_exit/early_exit.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/train/exit_trainer.h"
#include "common/train/recurrent_trainer.h"
#include "tests/edge_cloud_util.h"

namespace splitspec::test {
namespace {

Request greedy(int tokens) {
  Request req;
  req.max_new_tokens = tokens;
  req.ignore_eos = true;
  return req;
}

TEST(RecurrentDrafter, GreedyEqualsTheTargetAloneInMemoryAndStreamed) {
  const Request req = greedy(48);
  const auto want = demo_target_ids(req, 5);
  for (const std::string budget : {"", "25%"}) {
    for (const std::string width : {"1", "4"}) {
      ClientOptions o;
      o.verifier = VerifierKind::kLocal;
      o.target_dir = demo_target_dir();  // the head is found beside it
      o.drafter = "recurrent";
      o.memory_budget = budget;
      o.drafter_options["width"] = width;
      auto client = Client::connect(o);
      int64_t rounds = 0;
      for (int p = 0; p < 5; ++p) {
        const Result r = client->generate(test_prompts()[p], req);
        EXPECT_EQ(r.ids, want[p]) << "budget '" << budget << "' width " << width << " prompt " << p;
        rounds += r.stats.rounds;
        EXPECT_EQ(r.stats.draft_forwards > 0, true);
      }
      EXPECT_LT(rounds, 5 * 48 * 2 / 3) << "the head should be right often";
    }
  }
}

TEST(RecurrentDrafter, OverGrpcWithTheHiddenStateAndNoDraftModel) {
  const Request req = greedy(48);
  const auto want = demo_target_ids(req, 5);
  LocalServer srv = start_server(demo_target_dir());
  ClientOptions o;
  o.verifier = VerifierKind::kServer;
  o.server = srv.address;
  o.drafter = "recurrent";
  o.tokenizer = demo_target_dir();  // the tokenizer, and the head beside it
  ASSERT_TRUE(o.draft_dir.empty());
  auto client = Client::connect(o);
  for (int p = 0; p < 5; ++p) {
    const Result r = client->generate(test_prompts()[p], req);
    EXPECT_EQ(r.ids, want[p]) << "prompt " << p;
    EXPECT_LT(r.stats.rounds, 40);
    // 256 half values a round: 512 bytes, a tag and a two-byte length.
    EXPECT_EQ(r.stats.verdict_hidden_bytes, r.stats.rounds * (512 + 3)) << "prompt " << p;
    EXPECT_EQ(r.stats.verdict_top_k_bytes, 0);
  }
  // Pre-drafting: early verdicts carry their exit's hidden state, and the
  // head drafts the next round from it while the forward finishes.
  ClientOptions pre = o;
  pre.predraft = true;
  pre.predraft_threads = 2;  // forks share the head across threads
  auto fsd = Client::connect(pre);
  int64_t hits = 0, lookups = 0;
  for (int p = 0; p < 5; ++p) {
    const Result r = fsd->generate(test_prompts()[p], req);
    EXPECT_EQ(r.ids, want[p]) << "pre-drafting, prompt " << p;
    hits += r.stats.predraft_hits;
    lookups += r.stats.predraft_lookups;
  }
  // How many depends on when early verdicts arrive against the final ones
  // (here 29-36 of 57 idle or beside two busy cores, 20 under the whole
  // suite's load): some, not a rate, is what this test holds.
  EXPECT_GE(hits, 5) << "trees drafted from the exit's hidden state were sent (" << hits << " hits of " << lookups
                     << " lookups)";
  // The same drafts as a local run: the hidden state goes through half
  // precision either way.
  ClientOptions local;
  local.verifier = VerifierKind::kLocal;
  local.target_dir = demo_target_dir();
  local.drafter = "recurrent";
  local.drafter_options = {{"width", "2"}, {"length", "4"}};  // the server verifier's default
  auto here = Client::connect(local);
  const Result a = here->generate(test_prompts()[0], req), b = client->generate(test_prompts()[0], req);
  EXPECT_EQ(a.stats.rounds, b.stats.rounds);
  EXPECT_EQ(a.stats.tree_nodes, b.stats.tree_nodes);
}

// Beams are chosen, so nodes are verified as one-hot q: siblings by the
// multi-candidate residual, and the third token comes from beams that share
// their first token.
TEST(RecurrentDrafter, SampledOutputHasTheTargetsDistribution) {
  TempDir dir;
  constexpr int64_t kVocab = 10;
  const ModelConfig tc = tiny_config(kVocab, 2);
  Model::random(tc, 43)->save(dir.str("target"));
  RecurrentHead::random(small_recurrent_head(tc.hidden_size, kVocab), 9).save(dir.str("target"));
  init_exits(tc, {1}, 8, 4).save(dir.str("target"));
  auto target = Model::load(dir.str("target"));
  LocalServer srv = start_server(dir.str("target"));
  const std::vector<int32_t> prompt = {1, 5, 7};
  Request req;
  req.max_new_tokens = 3;
  req.ignore_eos = true;
  req.temperature = 0.05f;  // random weights give flat logits: sharpen them
  for (int where : {0, 1, 2}) {  // local, server, server with pre-drafting
    const bool server = where > 0;
    ClientOptions o;
    o.drafter = "recurrent";
    o.drafter_options = {{"width", "3"}, {"length", "2"}, {"head", dir.str("target")}};
    o.predraft = where == 2;
    auto client = Client::connect(with_verifier(o, server ? srv.address : "", dir.str("target")));
    int64_t packed = 0, branched = 0, accepted = 0, hits = 0;
    expect_targets_token_distributions(*client, *target, prompt, req, 3, 3000, 13000 + 10000 * static_cast<uint64_t>(where),
                                       [&](const Result& r) {
                                         branched += r.stats.branched_trees;
                                         const auto& c = r.stats.drafter_counters;
                                         if (c.count("recurrent_tree_nodes") &&
                                             c.at("recurrent_tree_nodes") < c.at("recurrent_beam_tokens"))
                                           packed += 1;
                                         accepted += static_cast<int64_t>(
                                             r.stats.accepted_per_round * static_cast<double>(r.stats.rounds) + 0.5);
                                         hits += r.stats.predraft_hits;
                                       });
    EXPECT_GT(branched, 1000) << "trees with siblings must be part of what is tested";
    // (A pre-drafted tree is counted by the fork that drafted it.)
    EXPECT_GT(packed, where == 2 ? 300 : 1000) << "beams sharing prefixes must be part of what is tested";
    EXPECT_GT(accepted, 300);
    if (where == 2) {
      EXPECT_GT(hits, 300) << "pre-drafted trees must be part of what is tested";
    }
  }
}

TEST(RecurrentDrafter, ClearErrors) {
  TempDir dir;
  ClientOptions o;
  o.verifier = VerifierKind::kLocal;
  o.target_dir = demo_target_dir();
  o.drafter = "recurrent";
  o.drafter_options = {{"width", "0"}};
  expect_connect_refused(o, "width must be in [1, 64]");
  o.drafter_options = {{"length", "x"}};
  expect_connect_refused(o, "not a whole number");
  o.drafter_options = {{"head", dir.str()}};
  expect_connect_refused(o, "no recurrent draft head");
  RecurrentHeadConfig other = small_recurrent_head(64, 8000);
  RecurrentHead::random(other, 1).save(dir.str());
  expect_connect_refused(o, "hidden size 64");
  o.predraft = true;
  expect_connect_refused(o, "pre-drafting needs the server verifier");
  o.predraft = false;
  o.drafter_options.clear();
  o.verifier = VerifierKind::kServer;
  LocalServer srv = start_server(demo_target_dir());
  o.server = srv.address;
  o.tokenizer = demo_target_dir() + "/tokenizer.model";  // a file: no directory to find a head in
  expect_connect_refused(o, "no head");
}

// A tiny target with the demo tokenizer: distillation, training, resuming.
TEST(TrainRecurrent, DistilsTheTargetsGreedyContinuationsAndResumes) {
  TempDir dir;
  const ModelConfig tc = tiny_config(8000, 1);
  Model::random(tc, 5)->save(dir.str("target"));
  std::filesystem::copy_file(demo_target_dir() + "/tokenizer.model", dir.path() / "target" / "tokenizer.model");
  write_file(dir.path() / "corpus.txt", "The ship sailed into the harbor at dawn, and the crew went ashore.\n\n"
                                        "Call me Ishmael. Some years ago, never mind how long precisely.\n");
  RecurrentTrainJob job;
  job.target_dir = dir.str("target");
  job.corpus = dir.str("corpus.txt");
  job.out_dir = dir.str("out");
  job.head = small_recurrent_head(0, 0);
  job.continuations = 10;
  job.opening_tokens = 4;
  job.new_tokens = 8;
  job.predict = 3;
  job.steps = 6;
  job.batch = 8;
  job.checkpoint_every = 2;
  job.progress = false;
  job.stop_after = 4;  // killed after four steps
  RecurrentTrainReport r = train_recurrent(job);
  EXPECT_FALSE(r.finished);
  EXPECT_LE(r.distilled_tokens, 10 * 8);
  // At most five positions of each of nine training continuations have three labels after them.
  EXPECT_GT(r.train_positions, 0);
  EXPECT_LE(r.train_positions, 9 * 5);
  EXPECT_NE(error_of([&] { train_recurrent(job); }).find("--resume"), std::string::npos);
  job.resume = true;
  job.stop_after = -1;
  RecurrentTrainJob other = job;
  other.predict = 2;
  EXPECT_NE(error_of([&] { train_recurrent(other); }).find("another train recurrent job"), std::string::npos);
  r = train_recurrent(job);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.steps, 6);
  EXPECT_EQ(r.accuracy.size(), 3u);
  const RecurrentHead head = RecurrentHead::load(dir.str("out"));
  head.check_target(tc.hidden_size, 8000, Tokenizer(demo_target_dir()).fingerprint());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "out" / "checkpoint-recurrent-data.pt"));

  job.corpus = dir.str("missing.txt");
  job.out_dir = dir.str("out2");
  EXPECT_NE(error_of([&] { train_recurrent(job); }).find("missing.txt"), std::string::npos);
  job.corpus = dir.str("corpus.txt");
  job.new_tokens = 3;
  EXPECT_NE(error_of([&] { train_recurrent(job); }).find("must exceed predict"), std::string::npos);
}

}  // namespace
}  // namespace splitspec::test

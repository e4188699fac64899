// The lut drafter end to end: DIAA's tables and dynamic tree through the
// local verifier (in memory and streamed) and the server verifier over real
// gRPC with no draft model on the client.
#include <gtest/gtest.h>

#include "client/client.h"
#include "common/drafting/lut_tables.h"
#include "common/drafting/registry.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/error.h"
#include "tests/edge_cloud_util.h"
#include "tests/test_util.h"

namespace splitspec::test {
namespace {

std::string demo_lut() { return demo_target_dir() + "/lut.safetensors"; }

ClientOptions local_lut(const std::string& budget, bool warm) {
  ClientOptions o;
  o.verifier = VerifierKind::kLocal;
  o.target_dir = demo_target_dir();
  o.drafter = "lut";
  o.memory_budget = budget;
  // Warm: the tables shipped beside the target, found there.
  if (!warm) o.drafter_options["tables"] = "none";
  return o;
}

// Tables beside the target are found as the recurrent head is: no option
// drafts as naming them does, and tables=none starts cold.
TEST(LutDrafter, TablesBesideTheTargetAreFoundThere) {
  Request req;
  req.max_new_tokens = 1;
  req.ignore_eos = true;
  ClientOptions named = local_lut("", true);
  named.drafter_options["tables"] = demo_lut();
  auto found = Client::connect(local_lut("", true));
  auto given = Client::connect(named);
  auto cold = Client::connect(local_lut("", false));
  // One round after three distinct tokens: cold tables know only the
  // prompt's pairs, none of which starts at its last token.
  const std::vector<int32_t> prompt = {1, 345, 1046};
  const Stats f = found->generate_ids(prompt, req).stats;
  const Stats g = given->generate_ids(prompt, req).stats;
  const Stats c = cold->generate_ids(prompt, req).stats;
  EXPECT_GT(f.drafted_tokens, 0);
  EXPECT_EQ(f.drafted_tokens, g.drafted_tokens);
  EXPECT_EQ(c.drafted_tokens, 0);
}

TEST(LutDrafter, GreedyEqualsTheTargetAloneInMemoryAndStreamed) {
  Request req;
  req.max_new_tokens = 48;
  req.ignore_eos = true;
  const auto want = demo_target_ids(req, 4);
  for (const std::string budget : {"", "25%"}) {
    for (bool warm : {true, false}) {
      auto client = Client::connect(local_lut(budget, warm));
      int64_t rounds = 0;
      for (int p = 0; p < 4; ++p) {
        const Result r = client->generate(test_prompts()[p], req);
        EXPECT_EQ(r.ids, want[p]) << "budget '" << budget << "' warm " << warm << " prompt " << p;
        rounds += r.stats.rounds;
        EXPECT_LT(r.stats.drafter_memory_bytes, (1u << 20) + 4096u);
      }
      EXPECT_LT(rounds, 4 * 48) << "the tables should be right sometimes";
    }
    ClientOptions pld = local_lut(budget, false);
    pld.drafter = "pld";
    pld.drafter_options.clear();
    auto client = Client::connect(pld);
    for (int p = 0; p < 4; ++p) EXPECT_EQ(client->generate(test_prompts()[p], req).ids, want[p]) << "pld " << p;
  }
}

TEST(LutDrafter, OverGrpcWithNoDraftModelOnTheClient) {
  Request req;
  req.max_new_tokens = 48;
  req.ignore_eos = true;
  const auto want = demo_target_ids(req, 6);
  LocalServer srv = start_server(demo_target_dir());
  for (const std::string drafter : {"lut", "pld"}) {
    ClientOptions o;
    o.verifier = VerifierKind::kServer;
    o.server = srv.address;
    o.drafter = drafter;
    o.tokenizer = demo_target_dir();  // no draft model: the tokenizer alone
    if (drafter == "lut") o.drafter_options["tables"] = demo_lut();
    ASSERT_TRUE(o.draft_dir.empty());
    auto client = Client::connect(o);
    for (int p = 0; p < 6; ++p) {
      const Result r = client->generate(test_prompts()[p], req);
      EXPECT_EQ(r.ids, want[p]) << drafter << " prompt " << p;
      EXPECT_LT(r.stats.rounds, 48);
      if (drafter == "lut") {
        // K = 8 ids and probabilities for each appended token.
        EXPECT_GT(r.stats.verdict_top_k_bytes, r.stats.rounds * 8 * 5);
      } else {
        EXPECT_EQ(r.stats.verdict_top_k_bytes, 0);
      }
    }
  }
}

// Sampled verification of chosen nodes (one-hot q): siblings and shared
// prefixes, every generation of one client learning into the same tables.
TEST(LutDrafter, SampledOutputHasTheTargetsDistribution) {
  TempDir dir;
  constexpr int64_t kVocab = 12;
  Model::random(tiny_config(kVocab, 2), 41)->save(dir.str("target"));
  auto target = Model::load(dir.str("target"));
  LocalServer srv = start_server(dir.str("target"));
  const std::vector<int32_t> prompt = {1, 5, 7};
  Request req;
  req.max_new_tokens = 3;
  req.ignore_eos = true;
  req.temperature = 0.05f;  // random weights give flat logits: sharpen them
  for (bool server : {false, true}) {
    ClientOptions o;
    o.drafter = "lut";
    auto client = Client::connect(with_verifier(o, server ? srv.address : "", dir.str("target")));
    int64_t branched = 0, accepted = 0, rounds = 0;
    expect_targets_two_token_distribution(*client, *target, prompt, req, 3000, server ? 21000 : 11000,
                                          [&](const Result& r) {
                                            branched += r.stats.branched_trees;
                                            rounds += r.stats.rounds;
                                            accepted += static_cast<int64_t>(
                                                r.stats.accepted_per_round * static_cast<double>(r.stats.rounds) + 0.5);
                                          });
    EXPECT_GT(branched, 1000) << "trees with siblings must be part of what is tested";
    EXPECT_GT(accepted, 300);
    EXPECT_LT(accepted, 2 * rounds);
  }
}

TEST(LutDrafter, TablesLearnAcrossGenerationsWithUpdatesOffTheCriticalPath) {
  auto client = Client::connect(local_lut("", false));
  Request req;
  req.max_new_tokens = 64;
  req.ignore_eos = true;
  const Result first = client->generate(test_prompts()[1], req);
  const Result second = client->generate(test_prompts()[1], req);
  EXPECT_EQ(first.ids, second.ids);
  EXPECT_LT(second.stats.rounds, first.stats.rounds) << "the second run finds the first one's top K in the tables";
  EXPECT_GT(second.stats.drafter_counters.at("lut_update_ms"), 0.0);
  EXPECT_GE(second.stats.drafter_counters.at("lut_update_wait_ms"), 0.0);
  EXPECT_EQ(second.stats.drafter_counters.at("lut_bytes"), first.stats.drafter_counters.at("lut_bytes"));
}

TEST(LutDrafter, ClearErrors) {
  TempDir dir;
  LutTables(50, LutOptions{}).save(dir.str("small.safetensors"), "");
  ClientOptions o = local_lut("", false);
  o.drafter_options["tables"] = dir.str("small.safetensors");
  expect_connect_refused(o, "vocabulary of 50");
  LutTables(8000, LutOptions{}).save(dir.str("other.safetensors"), "0123456789abcdef");
  o.drafter_options["tables"] = dir.str("other.safetensors");
  expect_connect_refused(o, "tokenizer 0123456789abcdef");
  o = local_lut("", true);
  o.drafter_options["tables"] = demo_lut();
  o.drafter_options["k"] = "4";
  expect_connect_refused(o, "start cold");
  o = local_lut("", false);
  o.drafter_options["bogus"] = "1";
  expect_connect_refused(o, "no option 'bogus'");
  o.drafter_options = {{"budget", "x"}};
  expect_connect_refused(o, "not a whole number");
  o.drafter_options = {{"tree", "round"}};
  expect_connect_refused(o, "neither dynamic nor static");
  o.drafter = "model";
  o.draft_dir = demo_draft_dir();
  o.drafter_options = {{"budget", "4"}};
  expect_connect_refused(o, "drafter model has no option 'budget'");

  // A server that sends fewer top-K entries than the tables keep.
  std::unique_ptr<Child> child;
  const std::string address = spawn_server(demo_target_dir(), dir, child, {"--max-verdict-top-k", "4"});
  ClientOptions edge;
  edge.verifier = VerifierKind::kServer;
  edge.server = address;
  edge.drafter = "lut";
  edge.tokenizer = demo_target_dir();
  edge.drafter_options["tables"] = demo_lut();
  expect_connect_refused(edge, "max_verdict_top_k");
  edge.drafter_options = {{"k", "4"}};
  Request req;
  req.max_new_tokens = 8;
  EXPECT_EQ(Client::connect(edge)->generate("The ship", req).ids.size(), 8u);
}

// `splitspec train lut` warm-starts tables a client then loads, and `generate
// --lut` uses them.
TEST(TrainLut, WritesTablesForTheTargetsVocabularyAndTokenizer) {
  TempDir dir;
  write_file(dir.str("warm.txt"),
             "The ship sailed out of the harbour at dawn, and the crew sang as the wind rose.\n\n"
             "Fellow citizens, the state of the Union is strong, and the Congress has done its part.\n");
  // Folders that do not exist yet are made (before the work, not after).
  const std::string out = dir.str("tables/warm/t.safetensors");
  const CliRun r = run_cli("train lut --target " + demo_target_dir() + " --corpus " + dir.str("warm.txt") +
                           " --tokens 60 --k 4 --order 2 --slots 128 --out " + out + " --threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(" positions, "), std::string::npos) << r.out;
  const LutTables t = LutTables::load(out, 8000, Tokenizer(demo_target_dir()).fingerprint());
  EXPECT_EQ(t.options().k, 4);
  EXPECT_EQ(t.options().order, 2);
  EXPECT_GT(t.rows_used(), 30);
  const CliRun g = run_cli("generate --target " + demo_target_dir() + " --drafter lut --lut " + out +
                           " --prompt 'The ship' --max-new-tokens 16 --json --threads 1");
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_NE(g.out.find("\"drafter\":\"lut\""), std::string::npos) << g.out;
  // A missing text and --lut without the lut drafter are clear errors.
  const CliRun bad = run_cli("train lut --target " + demo_target_dir() + " --corpus " + dir.str("none.txt") +
                             " --out " + out);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("none.txt"), std::string::npos) << bad.err;
  const CliRun wrong = run_cli("generate --target " + demo_target_dir() + " --lut " + out + " --prompt 'The ship'");
  EXPECT_NE(wrong.status, 0);
  EXPECT_NE(wrong.err.find("--lut gives the lut drafter its tables"), std::string::npos) << wrong.err;
}

}  // namespace
}  // namespace splitspec::test

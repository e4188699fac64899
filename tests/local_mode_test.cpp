// The local modes as users reach them: the client API and the CLI with a
// memory budget. Outputs equal the in-memory target's own, the stats report
// the streaming, and bad budgets, missing models and mismatched pairs give
// clear errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "client/client.h"
#include "common/model/model.h"
#include "common/util/error.h"
#include "tests/edge_cloud_util.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

ClientOptions local_options(Mode mode, const std::string& budget) {
  ClientOptions o;
  o.mode = mode;
  o.target_dir = demo_target_dir();
  o.draft_dir = demo_draft_dir();
  o.memory_budget = budget;
  return o;
}


}  // namespace

TEST(LocalModes, ClientApiMatchesTheTargetAloneAndReportsStreaming) {
  Request req;
  req.max_new_tokens = 32;
  req.ignore_eos = true;
  const std::string prompt = test_prompts()[0];
  const Result reference = Client::connect(local_options(Mode::kLocalAr, ""))->generate(prompt, req);
  ASSERT_EQ(reference.ids.size(), 32u);
  const uint64_t budget = stored_weight_bytes(demo_target_dir()) / 4;
  for (Mode mode : {Mode::kLocalAr, Mode::kLocalSd, Mode::kLocalTree}) {
    auto client = Client::connect(local_options(mode, "25%"));
    std::string streamed;
    const Result r = client->generate(prompt, req, [&](const std::string& piece) { streamed += piece; });
    EXPECT_EQ(r.ids, reference.ids) << mode_name(mode);
    EXPECT_EQ(r.text, reference.text);
    EXPECT_EQ(streamed, r.text);
    const Stats& s = r.stats;
    EXPECT_GT(s.weight_bytes_read, 0u) << mode_name(mode);
    EXPECT_GT(s.weight_memory_peak, 0u);
    EXPECT_LE(s.weight_memory_peak, budget);
    if (mode == Mode::kLocalAr) {
      EXPECT_EQ(s.target_forwards, 32);
    } else {
      EXPECT_LT(s.target_forwards, 32) << mode_name(mode) << ": speculation should need fewer target forwards";
      EXPECT_GT(s.accepted_per_round, 0.0);
    }
    if (mode == Mode::kLocalTree) {
      EXPECT_GT(s.tree_nodes, 0.0);
    }
  }
}

// A prompt longer than the local verifier's prefill chunk (256) is
// prefilled in chunks, and the tokens are still those of the target alone
// prefilling it in one forward.
TEST(LocalModes, ALongPromptPrefilledInChunksGivesTheTargetsTokens) {
  std::vector<int32_t> prompt = {1};
  for (int32_t i = 1; i < 400; ++i) prompt.push_back(3 + (i * 7919) % 7000);
  GenerateOptions g;
  g.max_new_tokens = 24;
  g.ignore_eos = true;
  const auto target = Model::load(demo_target_dir());
  const std::vector<int32_t> want = target_alone(*target, prompt, g).output_ids;
  Request req;
  req.max_new_tokens = 24;
  req.ignore_eos = true;
  for (Mode mode : {Mode::kLocalAr, Mode::kLocalSd, Mode::kLocalTree}) {
    const Result r = Client::connect(local_options(mode, ""))->generate_ids(prompt, req);
    EXPECT_EQ(r.ids, want) << mode_name(mode);
    if (mode == Mode::kLocalAr) {
      EXPECT_EQ(r.stats.target_forwards, 24 + 1) << "one chunk, then the rounds";
    }
  }
}

TEST(LocalModes, ClearErrors) {
  auto error = [](ClientOptions o) { return error_of([&] { Client::connect(o); }); };
  EXPECT_NE(error(local_options(Mode::kLocalTree, "lots")).find("cannot read 'lots' as a size"), std::string::npos);
  EXPECT_NE(error(local_options(Mode::kLocalTree, "1KiB")).find("is too small to stream this target"), std::string::npos);
  ClientOptions no_draft = local_options(Mode::kLocalSd, "25%");
  no_draft.draft_dir.clear();
  EXPECT_NE(error(no_draft).find("local-sd needs a draft model"), std::string::npos);
  ClientOptions missing = local_options(Mode::kLocalTree, "25%");
  missing.target_dir = "/no/such/model";
  EXPECT_NE(error(missing).find("/no/such/model: model directory does not exist"), std::string::npos);
  ClientOptions kv = local_options(Mode::kLocalAr, "");
  kv.kv_cache = "q8_0";
  EXPECT_NE(error(kv).find("unknown KV cache type 'q8_0' (choose f32 or f16)"), std::string::npos) << error(kv);
  kv = ClientOptions{};
  kv.mode = Mode::kCloudAr;
  kv.server = "127.0.0.1:1";
  kv.kv_cache = "f16";
  EXPECT_NE(error(kv).find("kv_cache sets the local target's cache"), std::string::npos) << error(kv);
  // A draft with another vocabulary.
  TempDir dir;
  Model::random(tiny_config(64, 2), 1)->save(dir.str("draft"));
  ClientOptions vocab = local_options(Mode::kLocalTree, "");
  vocab.draft_dir = dir.str("draft");
  EXPECT_NE(error(vocab).find("has vocab_size 64 but target"), std::string::npos);
  // A draft with the right vocabulary but another tokenizer.
  const auto shared = shared_dir();
  if (!shared) {
    std::cout << "../shared is absent: the tokenizer-mismatch case is not checked\n";
    return;
  }
  Model::random(tiny_config(8000, 1), 2)->save(dir.str("other"));
  std::filesystem::copy_file(*shared / "models" / "stories260K" / "tokenizer.model", dir.path() / "other" / "tokenizer.model");
  ClientOptions tok = local_options(Mode::kLocalSd, "");
  tok.draft_dir = dir.str("other");
  EXPECT_NE(error(tok).find("have different tokenizers; draft and target must share one tokenizer"), std::string::npos)
      << error(tok);
}

TEST(LocalModes, CliLocalTreeEqualsLocalAr) {
  const std::string common = "generate --target " + demo_target_dir() + " --draft " + demo_draft_dir() +
                             " --prompt 'The ship sailed' --max-new-tokens 24 --ignore-eos --json";
  const CliRun ar = run_cli(common + " --mode local-ar");
  ASSERT_EQ(ar.status, 0) << ar.err;
  const auto ar_json = nlohmann::json::parse(ar.out);
  for (const std::string extra : {" --mode local-sd --memory-budget 10%", " --mode local-tree --memory-budget 4MB",
                                  " --mode local-tree --memory-budget 25% --no-fallback --no-provisional",
                                  " --mode local-ar --memory-budget 50% --no-pipeline"}) {
    const CliRun r = run_cli(common + extra);
    ASSERT_EQ(r.status, 0) << extra << "\n" << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["output_ids"], ar_json["output_ids"]) << extra;
    EXPECT_GT(j["stats"]["weight_bytes_read"].get<uint64_t>(), 0u) << extra;
  }
  const CliRun bad = run_cli(common + " --mode local-tree --memory-budget 12parsecs");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("cannot read '12parsecs' as a size"), std::string::npos) << bad.err;
  const CliRun no_target = run_cli("generate --mode local-tree --draft " + demo_draft_dir() + " --prompt-ids 1");
  EXPECT_EQ(no_target.status, 1);
  EXPECT_NE(no_target.err.find("local-tree needs --target DIR"), std::string::npos) << no_target.err;
}

}  // namespace splitspec::test

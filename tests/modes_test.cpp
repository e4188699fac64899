// Modes as users pick them: a verifier and a drafter, through the CLI and the
// API. The old mode names are aliases with identical output; every choice on
// the demo pair gives the target's own greedy tokens; a combination that
// cannot work is a clear error, never a silent fallback.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "client/client.h"
#include "common/util/error.h"
#include "tests/edge_cloud_util.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

nlohmann::json generate_json(const std::string& args) {
  const CliRun r = run_cli("generate --prompt 'The committee reported that' --max-new-tokens 24 --ignore-eos --json --gamma 3 " +
                           args);
  if (r.status != 0) throw std::runtime_error(args + ": " + r.err);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST(Modes, EveryAliasAndItsChoicesGiveTheTargetsGreedyTokens) {
  LocalServer srv = start_server(demo_target_dir());
  const std::string models = " --target " + demo_target_dir() + " --draft " + demo_draft_dir();
  const std::string server = " --server " + srv.address + " --draft " + demo_draft_dir();
  const nlohmann::json reference = generate_json("--target " + demo_target_dir());
  EXPECT_EQ(reference["mode"], "local-ar") << "no server and no draft: the target alone";
  const auto want = reference["output_ids"];
  ASSERT_EQ(want.size(), 24u);
  // alias, the same as choices, the mode name both report.
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"--mode local-ar" + models, "--verifier local --drafter none" + models, "local-ar"},
      {"--mode local-sd" + models, "--verifier local --drafter model" + models, "local-sd"},
      {"--mode local-tree --memory-budget 25%" + models, "--verifier local --drafter model-tree --memory-budget 25%" + models,
       "local-tree"},
      {"--mode cloud-ar" + server, "--verifier server --drafter none" + server, "cloud-ar"},
      {"--mode edge-sd" + server, "--verifier server --drafter model" + server, "edge-sd"},
      {"--mode edge-fsd" + server, "--drafter model --predraft" + server, "edge-fsd"},
  };
  for (const auto& [alias, choices, name] : cases) {
    const nlohmann::json a = generate_json(alias), c = generate_json(choices);
    EXPECT_EQ(a["output_ids"], want) << alias;
    EXPECT_EQ(c["output_ids"], want) << choices;
    EXPECT_EQ(a["mode"], name);
    EXPECT_EQ(c["mode"], name) << "choices report the alias they match";
    EXPECT_EQ(a["verifier"], c["verifier"]);
    EXPECT_EQ(a["drafter"], c["drafter"]);
    EXPECT_EQ(a["stats"].value("rounds", -1), c["stats"].value("rounds", -1))
        << name << ": the same rounds, not just the same tokens";
  }
  // Choices with no alias: trees over the wire, with and without pre-drafting.
  for (const std::string extra : {"", " --predraft"}) {
    const nlohmann::json t = generate_json("--drafter model-tree" + server + extra);
    EXPECT_EQ(t["output_ids"], want) << extra;
    EXPECT_EQ(t["mode"], "server+model-tree" + std::string(extra.empty() ? "" : "+predraft"));
    EXPECT_GT(t["stats"]["tree_nodes"].get<double>(), 1.0);
  }
  EXPECT_TRUE(wait_until([&] { return srv.server->active_sessions() == 0; }, std::chrono::seconds(10)));
}

TEST(Modes, CombinationsThatCannotWorkAreClearErrors) {
  const std::string target = " --target " + demo_target_dir() + " --draft " + demo_draft_dir() + " --prompt x";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--verifier local --predraft" + target, "pre-drafting needs the server verifier"},
      {"--verifier server --server 127.0.0.1:1 --drafter none --predraft --prompt-ids 1", "none drafts nothing"},
      {"--drafter oracle" + target, "unknown drafter 'oracle' (none, model, "},
      {"--mode edge-sd --verifier server --prompt x", "give either --mode or --verifier/--drafter/--predraft"},
      {"--verifier server --drafter model --prompt x", "edge-sd needs a server (--server HOST:PORT)"},
      {"--verifier local --drafter model-tree --target " + demo_target_dir() + " --prompt x",
       "local-tree needs a draft model (--draft DIR)"},
      {"--server 127.0.0.1:1 --draft " + demo_draft_dir() + " --memory-budget 25% --prompt x",
       "a memory budget streams the local target"},
      {"--drafter-option width" + target, "--drafter-option takes KEY=VALUE"},
      {"--verifier remote" + target, "--verifier"},
  };
  for (const auto& [args, message] : cases) {
    const CliRun r = run_cli("generate " + args);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.err;  // usage errors too
    EXPECT_NE(r.err.find(message), std::string::npos) << args << "\n" << r.err;
  }
  // The API says the same.
  ClientOptions o;
  o.verifier = VerifierKind::kLocal;
  o.predraft = true;
  o.target_dir = demo_target_dir();
  o.draft_dir = demo_draft_dir();
  EXPECT_NE(error_of([&] { Client::connect(o); }).find("pre-drafting needs the server verifier"), std::string::npos);
  EXPECT_NE(error_of([] { with_mode(ClientOptions{}, "edge"); }).find("unknown mode 'edge'"), std::string::npos);
  EXPECT_NE(error_of([] { with_mode(ClientOptions{}, "cloud+model"); }).find("unknown verifier 'cloud'"), std::string::npos);
}

TEST(Modes, NamesRoundTripAndHelpListsEveryDrafter) {
  for (const char* name : {"local-ar", "local-sd", "local-tree", "cloud-ar", "edge-sd", "edge-fsd", "server+model-tree",
                           "server+model-tree+predraft", "local+model-tree"}) {
    const std::string got = mode_name(with_mode(ClientOptions{}, name));
    EXPECT_EQ(got, std::string(name) == "local+model-tree" ? "local-tree" : name);
  }
  const CliRun r = run_cli("generate --help");
  ASSERT_EQ(r.status, 0);
  for (const char* part : {"--verifier", "--drafter", "--predraft", "none:", "model:", "model-tree:", "--mode"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part;
}

}  // namespace splitspec::test

// A generation outlives its server: killed (SIGKILL) mid-generation and
// restarted on the same port within the reconnect budget, the generation
// completes with exactly the tokens of an uninterrupted run, greedy and
// seeded sampling alike, and the callback never sees a token twice.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <thread>

#include "client/client.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

using test::TempDir;

struct Run {
  Result result;
  std::vector<int32_t> streamed;
  std::string restart_error;
};

// Generates with `drafter` against a server child; after `kill_at` streamed
// tokens (0: never) kills it with SIGKILL and starts a new one on the same
// port, from the callback, so the break lands mid-generation. The new one
// serves `restarted_target` (default: the demo target again); with
// `fallback`, the client has the demo target as its fallback.
Run generate_through_a_restart(const std::string& drafter, const Request& req, int kill_at,
                               const std::string& restarted_target = "", bool fallback = false) {
  TempDir tmp;
  std::unique_ptr<test::Child> server;
  const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server);
  ClientOptions o = test::server_options(address, drafter);
  o.reconnect_budget = std::chrono::seconds(60);
  if (fallback) o.fallback_target_dir = test::demo_target_dir();
  const std::string next = restarted_target.empty() ? test::demo_target_dir() : restarted_target;
  auto client = Client::connect(o);
  Run run;
  std::thread restart;
  const std::vector<int32_t> prompt = test::encode_prompt(Tokenizer(test::demo_target_dir()), "Once upon a time");
  auto join = [&] {
    if (restart.joinable()) restart.join();
  };
  struct Joiner {
    std::function<void()> f;
    ~Joiner() { f(); }
  } joiner{join};
  run.result = client->generate_ids(prompt, req, [&](int32_t id) {
    run.streamed.push_back(id);
    if (static_cast<int>(run.streamed.size()) == kill_at) {
      test::kill_server(*server);
      // On another thread: the generation meanwhile finds the stream broken.
      restart = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        run.restart_error = test::restart_server_at(address, next, tmp, server);
      });
    }
  });
  if (restart.joinable()) restart.join();
  return run;
}

void expect_resumed_run_equals_uninterrupted(const std::string& drafter, const Request& req) {
  const Run plain = generate_through_a_restart(drafter, req, 0);
  const Run broken = generate_through_a_restart(drafter, req, 12);
  ASSERT_EQ(broken.restart_error, "");
  ASSERT_EQ(plain.result.ids.size(), static_cast<size_t>(req.max_new_tokens));
  EXPECT_EQ(broken.result.ids, plain.result.ids) << drafter;
  EXPECT_EQ(broken.streamed, broken.result.ids) << drafter << ": a token streamed twice or lost";
  EXPECT_GE(broken.result.stats.resumes, 1) << drafter;
  EXPECT_EQ(plain.result.stats.resumes, 0);
  EXPECT_GT(broken.result.stats.switch_ms, 0.0);
}

Request long_request(float temperature) { return test::fixed_length_request(96, temperature, 11); }

TEST(Resume, ServerKilledAndRestartedGivesTheUninterruptedTokensGreedy) {
  expect_resumed_run_equals_uninterrupted("model", long_request(0.0f));
}

TEST(Resume, ServerKilledAndRestartedGivesTheUninterruptedTokensSampled) {
  expect_resumed_run_equals_uninterrupted("model", long_request(0.8f));
}

TEST(Resume, CloudArStreamCallsAgainFromTheTokensSoFar) {
  expect_resumed_run_equals_uninterrupted("none", long_request(0.8f));
}

// The server comes back serving another model (the demo draft: the same
// tokenizer and vocabulary). With a fallback target the generation goes on
// there with the target's own tokens; it used to fail with the check's error.
// Without one, a clear error; never the other model's tokens.
TEST(Resume, AServerBackWithAnotherModelHandsTheGenerationToTheFallback) {
  const Request req = long_request(0.0f);
  const splitspec::Run plain = generate_through_a_restart("model", req, 0);
  const splitspec::Run moved = generate_through_a_restart("model", req, 12, test::demo_draft_dir(), true);
  ASSERT_EQ(moved.restart_error, "");
  EXPECT_EQ(moved.result.ids, plain.result.ids);
  EXPECT_GE(moved.result.stats.failovers, 1);
  for (const char* drafter : {"model", "none"}) {
    const std::string err =
        test::error_of([&] { generate_through_a_restart(drafter, req, 12, test::demo_draft_dir(), false); });
    EXPECT_NE(err.find("now serves demo-draft"), std::string::npos) << drafter << ": " << err;
  }
}

// A server back with the same model name, vocabulary, tokenizer and shape
// but other weights (a Q4_0 copy of the target) is told apart by its
// weights digest: a clear error, or the fallback's exact tokens, never the
// copy's.
TEST(Resume, AServerBackWithAQuantizedCopyIsToldApartByItsWeights) {
  TempDir copies;
  const std::string copy = copies.str("q4_0") + "/demo-target";
  Model::load(test::demo_target_dir())->save(copy, WType::Q4_0);
  std::filesystem::copy_file(test::demo_target_dir() + "/tokenizer.model", copy + "/tokenizer.model");
  const Request req = long_request(0.0f);
  const splitspec::Run plain = generate_through_a_restart("model", req, 0);
  const splitspec::Run moved = generate_through_a_restart("model", req, 12, copy, true);
  ASSERT_EQ(moved.restart_error, "");
  EXPECT_EQ(moved.result.ids, plain.result.ids);
  EXPECT_GE(moved.result.stats.failovers, 1);
  for (const char* drafter : {"model", "none"}) {
    const std::string err = test::error_of([&] { generate_through_a_restart(drafter, req, 12, copy, false); });
    EXPECT_NE(err.find("weights digest"), std::string::npos) << drafter << ": " << err;
    EXPECT_NE(err.find("q4_0"), std::string::npos) << drafter << ": " << err;
  }
}

TEST(Resume, AServerThatStaysDownFailsAfterTheBudgetNamingIt) {
  TempDir tmp;
  std::unique_ptr<test::Child> server;
  const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server);
  ClientOptions o = test::server_options(address, "model");
  o.reconnect_budget = std::chrono::milliseconds(300);
  auto client = Client::connect(o);
  Request req = long_request(0.0f);
  int seen = 0;
  const std::string err = test::error_of([&] {
    client->generate("Once upon a time", req, [&](const std::string&) {
      if (++seen == 3) {
        test::kill_server(*server);
      }
    });
  });
  EXPECT_NE(err.find("UNAVAILABLE"), std::string::npos) << err;
  EXPECT_NE(err.find("reconnect budget of 300 ms"), std::string::npos) << err;
}

}  // namespace
}  // namespace splitspec

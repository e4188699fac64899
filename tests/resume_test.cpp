// A generation outlives its server: killed (SIGKILL) mid-generation and
// restarted on the same port within the reconnect budget, the generation
// completes with exactly the tokens of an uninterrupted run, greedy and
// seeded sampling alike, and the callback never sees a token twice.
#include <gtest/gtest.h>

#include <thread>

#include "client/client.h"
#include "common/engine/tokenizer.h"
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
// port, from the callback, so the break lands mid-generation.
Run generate_through_a_restart(const std::string& drafter, const Request& req, int kill_at) {
  TempDir tmp;
  std::unique_ptr<test::Child> server;
  const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server);
  ClientOptions o = test::server_options(address, drafter);
  o.reconnect_budget = std::chrono::seconds(60);
  auto client = Client::connect(o);
  Run run;
  std::thread restart;
  const std::vector<int32_t> prompt = test::encode_prompt(Tokenizer(test::demo_target_dir()), "Once upon a time");
  run.result = client->generate_ids(prompt, req, [&](int32_t id) {
    run.streamed.push_back(id);
    if (static_cast<int>(run.streamed.size()) == kill_at) {
      test::kill_server(*server);
      // On another thread: the generation meanwhile finds the stream broken.
      restart = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        run.restart_error = test::restart_server_at(address, test::demo_target_dir(), tmp, server);
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

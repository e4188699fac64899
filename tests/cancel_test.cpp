// A robot controller stops a generation on an event: Client::cancel() from
// another thread, a callback returning false, or the handle of
// generate_async. Each ends the call within one round, returns what was
// made (finish "cancelled"), and frees the server's session at once.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "client/client.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

Request endless() {
  Request req;
  req.max_new_tokens = 400;
  req.ignore_eos = true;
  return req;
}

std::vector<int32_t> prompt() { return test::encode_prompt(Tokenizer(test::demo_target_dir()), "A robot arm"); }

ClientOptions options_for(const std::string& address, const std::string& drafter) {
  ClientOptions o = test::with_verifier(ClientOptions{}, address, test::demo_target_dir());
  o.drafter = drafter;
  o.draft_dir = test::demo_draft_dir();
  o.threads = 1;
  return o;
}

bool sessions_freed(const std::string& address) {
  return test::wait_until([&] { return test::server_stats(address).active_sessions() == 0; },
                          std::chrono::seconds(5));
}

// The most tokens one round can add: a draft of gamma and the target's own.
constexpr size_t kRound = 5;

class CancelEveryWay : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(CancelEveryWay, FromAnotherThreadWithinOneRound) {
  const auto& [drafter, on_server] = GetParam();
  test::LocalServer srv;
  if (on_server) srv = test::start_server(test::demo_target_dir());
  auto client = Client::connect(options_for(srv.address, drafter));
  std::atomic<size_t> seen{0};
  std::atomic<size_t> at_cancel{0};
  // Slow enough for the cancel to land mid-generation.
  const OnToken each = [&](int32_t) {
    seen += 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  std::thread stopper([&] {
    test::wait_until([&] { return seen >= 20; }, std::chrono::seconds(30));
    at_cancel = seen.load();
    client->cancel();
  });
  const Result r = client->generate_ids(prompt(), endless(), each);
  stopper.join();
  EXPECT_EQ(r.finish_reason, "cancelled");
  EXPECT_EQ(r.ids.size(), seen.load());
  EXPECT_LE(r.ids.size(), at_cancel + kRound);
  if (on_server) {
    EXPECT_TRUE(sessions_freed(srv.address));
  }
  // The client works on.
  Request next = endless();
  next.max_new_tokens = 8;
  EXPECT_EQ(client->generate_ids(prompt(), next).ids.size(), 8u);
}

TEST_P(CancelEveryWay, ACallbackReturningFalseStopsAtThatToken) {
  const auto& [drafter, on_server] = GetParam();
  test::LocalServer srv;
  if (on_server) srv = test::start_server(test::demo_target_dir());
  auto client = Client::connect(options_for(srv.address, drafter));
  int seen = 0;
  const Result r = client->generate_ids(prompt(), endless(), [&](int32_t) { return ++seen < 7; });
  EXPECT_EQ(r.finish_reason, "cancelled");
  EXPECT_EQ(r.ids.size(), 7u);
  if (on_server) {
    EXPECT_TRUE(sessions_freed(srv.address));
  }
  // Text callbacks may stop too.
  int pieces = 0;
  const Result t = client->generate("A robot arm", endless(), [&](const std::string&) { return ++pieces < 3; });
  EXPECT_EQ(t.finish_reason, "cancelled");
  EXPECT_LT(t.ids.size(), 400u);
}

INSTANTIATE_TEST_SUITE_P(, CancelEveryWay,
                         ::testing::Values(std::make_tuple("model", true), std::make_tuple("none", true),
                                           std::make_tuple("model", false)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) ? "_server" : "_local");
                         });

TEST(Cancel, AsyncHandleWaitsPollsAndCancels) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  auto client = Client::connect(options_for(srv.address, "model"));
  Request short_req = endless();
  short_req.max_new_tokens = 16;
  Generation done = client->generate_ids_async(prompt(), short_req);
  ASSERT_TRUE(done.wait_for(std::chrono::seconds(30)));
  EXPECT_TRUE(done.done());
  const Result r = done.get();
  EXPECT_EQ(r.ids.size(), 16u);
  EXPECT_NE(test::error_of([&] { done.get(); }).find("taken already"), std::string::npos);

  std::atomic<int> seen{0};
  Generation running = client->generate_ids_async(prompt(), endless(), [&](int32_t) {
    seen += 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  test::wait_until([&] { return seen >= 10; }, std::chrono::seconds(30));
  EXPECT_FALSE(running.done());
  running.cancel();
  const Result c = running.get();
  EXPECT_EQ(c.finish_reason, "cancelled");
  EXPECT_LT(c.ids.size(), 400u);
  EXPECT_TRUE(sessions_freed(srv.address));

  // Errors arrive through get().
  Request bad = endless();
  bad.temperature = -1.0f;
  Generation failing = client->generate_ids_async(prompt(), bad);
  EXPECT_NE(test::error_of([&] { failing.get(); }).find("temperature"), std::string::npos);
}

TEST(Cancel, AHandleDroppedMidGenerationCancelsIt) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  auto client = Client::connect(options_for(srv.address, "model"));
  {
    Generation g = client->generate_ids_async(prompt(), endless(), [](int32_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
  }
  EXPECT_TRUE(sessions_freed(srv.address));
}

// A callback that throws ends the call with its exception; nothing of that
// call is left for a later cancel() to reach into.
TEST(Cancel, ACallbackThatThrowsLeavesNothingBehind) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  for (const std::string drafter : {"none", "model"}) {
    auto client = Client::connect(options_for(srv.address, drafter));
    int seen = 0;
    EXPECT_THROW(client->generate_ids(prompt(), endless(),
                                      [&](int32_t) {
                                        if (++seen == 3) throw std::runtime_error("the robot's own error");
                                      }),
                 std::runtime_error);
    client->cancel();
    Request next = endless();
    next.max_new_tokens = 8;
    EXPECT_EQ(client->generate_ids(prompt(), next).ids.size(), 8u) << drafter;
    EXPECT_TRUE(sessions_freed(srv.address)) << drafter;
  }
}

TEST(Cancel, ANegativeRoundTimeoutIsRefused) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  auto client = Client::connect(options_for(srv.address, "model"));
  Request req = endless();
  req.round_timeout = std::chrono::milliseconds(-1);
  EXPECT_NE(test::error_of([&] { client->generate_ids(prompt(), req); }).find("round_timeout must be >= 0"),
            std::string::npos);
}

}  // namespace
}  // namespace splitspec

// The robot's answer to losing the network: with a fallback target, a
// generation whose server dies goes on with the local verifier at the next
// round boundary, and returns to the server once its health says SERVING.
// Same weights, same kernels: the tokens are those of an uninterrupted server
// run, greedy and seeded sampling alike.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <regex>
#include <thread>

#include "client/cli/netem_proxy.h"
#include "client/client.h"
#include "client/request_options.h"
#include "common/backend/cpu_backend.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/edge_cloud_util.h"
#include "tests/test_util.h"

namespace splitspec {
namespace {

using test::TempDir;

ClientOptions edge_options(const std::string& address, const std::string& drafter) {
  ClientOptions o = test::server_options(address, drafter);
  o.fallback_target_dir = test::demo_target_dir();
  o.failback_interval = std::chrono::milliseconds(100);
  return o;
}

Request long_request(float temperature) { return test::fixed_length_request(120, temperature, 5); }

std::vector<int32_t> prompt() { return test::encode_prompt(Tokenizer(test::demo_target_dir()), "The little robot"); }

// Kills the server after `kill_at` streamed tokens and starts it again on the
// same port after `restart_at`: rounds in between run on the fallback.
void expect_failover_and_back(const std::string& drafter, float temperature) {
  TempDir tmp;
  std::unique_ptr<test::Child> server;
  const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server);
  auto client = Client::connect(edge_options(address, drafter));
  const Request req = long_request(temperature);
  const Result plain = client->generate_ids(prompt(), req);
  ASSERT_EQ(plain.stats.failovers, 0);
  ASSERT_EQ(plain.stats.fallback_rounds, 0);

  std::vector<int32_t> streamed;
  std::string restart_error;
  const Result moved = client->generate_ids(prompt(), req, [&](int32_t id) {
    streamed.push_back(id);
    if (streamed.size() == 10) {
      test::kill_server(*server);
    }
    if (streamed.size() == 50) {
      restart_error = test::restart_server_at(address, test::demo_target_dir(), tmp, server);
      // Long enough for the health watch to see it.
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
    }
  });
  ASSERT_EQ(restart_error, "");
  EXPECT_EQ(moved.ids, plain.ids) << drafter << " at temperature " << temperature;
  EXPECT_EQ(streamed, moved.ids) << "a token streamed twice or lost";
  const Stats& s = moved.stats;
  EXPECT_EQ(s.failovers, 1);
  EXPECT_EQ(s.failbacks, 1);
  EXPECT_GT(s.fallback_rounds, 0);
  EXPECT_GT(s.server_rounds, 0);
  EXPECT_EQ(s.server_rounds + s.fallback_rounds, s.rounds);
  EXPECT_EQ(s.retried_rounds, 1);
  EXPECT_GT(s.switch_ms, 0.0);
}

TEST(Failover, ServerKilledGoesLocalAndComesBackGreedy) { expect_failover_and_back("model", 0.0f); }

TEST(Failover, ServerKilledGoesLocalAndComesBackSampled) { expect_failover_and_back("model", 0.8f); }

TEST(Failover, PlainDecodingRunsRoundsThatCanMove) { expect_failover_and_back("none", 0.0f); }

// An offline start: with a fallback, connecting to a server that is down
// succeeds, generations run on the fallback with the server's tokens, and
// when the server comes up mid-generation the later rounds move to it.
void expect_offline_start(float temperature) {
  TempDir tmp;
  std::unique_ptr<test::Child> server;
  const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server);
  const Request req = long_request(temperature);
  const Result online = Client::connect(edge_options(address, "model"))->generate_ids(prompt(), req);
  ASSERT_EQ(online.stats.offline_starts, 0);
  test::kill_server(*server);

  auto client = Client::connect(edge_options(address, "model"));
  const Result offline = client->generate_ids(prompt(), req);
  EXPECT_EQ(offline.ids, online.ids) << "temperature " << temperature;
  EXPECT_EQ(offline.stats.offline_starts, 1);
  EXPECT_EQ(offline.stats.server_rounds, 0);
  EXPECT_EQ(offline.stats.fallback_rounds, offline.stats.rounds);

  std::vector<int32_t> streamed;
  std::string restart_error;
  const Result moved = client->generate_ids(prompt(), req, [&](int32_t id) {
    streamed.push_back(id);
    if (streamed.size() == 20) {
      restart_error = test::restart_server_at(address, test::demo_target_dir(), tmp, server);
      std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the health watch sees it
    }
  });
  ASSERT_EQ(restart_error, "");
  EXPECT_EQ(moved.ids, online.ids) << "temperature " << temperature;
  EXPECT_EQ(streamed, moved.ids) << "a token streamed twice or lost";
  EXPECT_EQ(moved.stats.offline_starts, 1);
  EXPECT_GE(moved.stats.failbacks, 1);
  EXPECT_GT(moved.stats.server_rounds, 0);
  EXPECT_EQ(moved.stats.server_rounds + moved.stats.fallback_rounds, moved.stats.rounds);

  // Confirmed now: the next generation starts on the server.
  const Result after = client->generate_ids(prompt(), req);
  EXPECT_EQ(after.ids, online.ids);
  EXPECT_EQ(after.stats.offline_starts, 0);
  EXPECT_EQ(after.stats.fallback_rounds, 0);
}

TEST(Failover, AnOfflineStartRunsOnTheFallbackAndMovesToTheServerGreedy) { expect_offline_start(0.0f); }

TEST(Failover, AnOfflineStartRunsOnTheFallbackAndMovesToTheServerSampled) { expect_offline_start(0.8f); }

// The same from the command line: a closed port and a fallback target give
// the target's own tokens.
TEST(Failover, GenerateAtAClosedPortWithAFallbackGivesTheTargetsTokens) {
  const std::string common = " --prompt-ids 1,345,1046 --max-new-tokens 24 --ignore-eos --json --threads 1";
  const test::CliRun local = test::run_cli("generate --target " + test::demo_target_dir() + common);
  ASSERT_EQ(local.status, 0) << local.err;
  const test::CliRun offline = test::run_cli("generate --server 127.0.0.1:1 --fallback-target " +
                                             test::demo_target_dir() + " --draft " + test::demo_draft_dir() + common);
  ASSERT_EQ(offline.status, 0) << offline.err;
  const auto l = nlohmann::json::parse(local.out), o = nlohmann::json::parse(offline.out);
  EXPECT_EQ(o["output_ids"], l["output_ids"]);
  EXPECT_EQ(o["stats"]["offline_starts"], 1);
  EXPECT_EQ(o["stats"]["server_rounds"], 0);
}

// An offline-started client that then reaches a server with another model
// stays on the fallback, as a failback to one does.
TEST(Failover, AnOfflineStartNeverMovesToAServerWithAnotherModel) {
  TempDir tmp;
  std::unique_ptr<test::Child> server;
  const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server);
  test::kill_server(*server);
  auto client = Client::connect(edge_options(address, "model"));
  // The draft model shares the target's tokenizer and vocabulary: only its
  // weights tell it apart.
  ASSERT_EQ(test::restart_server_at(address, test::demo_draft_dir(), tmp, server), "");
  const Request req = long_request(0.0f);
  const Result r = client->generate_ids(prompt(), req);
  EXPECT_EQ(r.ids, test::target_alone(*Model::load(test::demo_target_dir()), prompt(), to_generate_options(req)).output_ids);
  EXPECT_EQ(r.stats.server_rounds, 0);
  EXPECT_EQ(r.stats.offline_starts, 1);
}

// A server behind a slow link answers every round, but at its measured pace
// the generation would end after its deadline: with a fallback the client
// finishes locally in time, with the target's tokens; without one the
// deadline passes.
TEST(Failover, AServerTooSlowForTheDeadlineHandsTheRestToTheFallback) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  NetemOptions n;
  n.upstream = srv.address;
  n.delay_ms = 150;  // 300 ms a round trip: about 6 s for the whole generation
  NetemProxy proxy(n);
  proxy.start();
  const std::string address = "127.0.0.1:" + std::to_string(proxy.port());
  Request req = test::fixed_length_request(64, 0.0f, 5);
  // Room for the rest to verify locally after three server rounds, under a
  // sanitizer too.
  req.deadline = std::chrono::milliseconds(3000);
  const auto want = test::target_alone(*Model::load(test::demo_target_dir()), prompt(), to_generate_options(req));

  auto with_fallback = Client::connect(edge_options(address, "model"));
  const Result r = with_fallback->generate_ids(prompt(), req);
  EXPECT_EQ(r.ids, want.output_ids);
  EXPECT_EQ(r.stats.deadline_failovers, 1);
  EXPECT_EQ(r.stats.failovers, 1);
  EXPECT_GE(r.stats.server_rounds, 3) << "the pace is measured on the server's rounds first";
  EXPECT_GT(r.stats.fallback_rounds, 0);
  EXPECT_LT(r.stats.wall_ms, 3000.0);

  auto without = Client::connect(test::server_options(address, "model"));
  try {
    without->generate_ids(prompt(), req);
    FAIL() << "a 6 s generation met a 3 s deadline";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DEADLINE_EXCEEDED"), std::string::npos) << e.what();
  }
}

TEST(Failover, ServerNeverBackCompletesLocallyWithTheTargetsTokens) {
  TempDir tmp;
  std::unique_ptr<test::Child> server;
  const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server);
  ClientOptions o = edge_options(address, "model-tree");
  o.memory_budget = "50%";  // the fallback streamed from disk, as on a small device
  auto client = Client::connect(o);
  Request req = long_request(0.0f);
  req.max_new_tokens = 64;
  int seen = 0;
  const Result r = client->generate_ids(prompt(), req, [&](int32_t) {
    if (++seen == 5) {
      test::kill_server(*server);
    }
  });
  EXPECT_EQ(r.ids, test::demo_target_ids_of(prompt(), req));
  EXPECT_EQ(r.stats.failovers, 1);
  EXPECT_EQ(r.stats.failbacks, 0);
  EXPECT_GT(r.stats.fallback_rounds, 0);
  EXPECT_GT(r.stats.weight_bytes_read, 0u);
}

// A server with an F16 KV cache: the fallback takes the server's cache type
// from ServerInfo, so the generation goes on with the server's tokens; a
// client that insists on another type is refused.
TEST(Failover, TheFallbackTakesTheServersKVCacheType) {
  TempDir tmp;
  std::unique_ptr<test::Child> server;
  const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server, {"--kv-cache", "f16"});
  auto client = Client::connect(edge_options(address, "model"));
  EXPECT_EQ(client->server_info().kv_cache, "f16");
  Request req = long_request(0.0f);
  req.max_new_tokens = 64;
  const Result plain = client->generate_ids(prompt(), req);
  int seen = 0;
  const Result moved = client->generate_ids(prompt(), req, [&](int32_t) {
    if (++seen == 5) test::kill_server(*server);
  });
  EXPECT_EQ(moved.ids, plain.ids);
  EXPECT_EQ(moved.stats.failovers, 1);
  EXPECT_GT(moved.stats.fallback_rounds, 0);

  const std::string again = test::spawn_server(test::demo_target_dir(), tmp, server, {"--kv-cache", "f16"});
  ClientOptions o = edge_options(again, "model");
  o.kv_cache = "f32";
  test::expect_connect_refused(o, "is not server");
}

TEST(Failover, AServerTooSlowForTheRoundTimeoutHandsRoundsToTheFallback) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  NetemOptions slow;
  slow.upstream = srv.address;
  slow.delay_ms = 150;  // each way: no round comes back within the timeout
  NetemProxy proxy(slow);
  proxy.start();
  auto client = Client::connect(edge_options("127.0.0.1:" + std::to_string(proxy.port()), "model"));
  Request req = long_request(0.0f);
  req.max_new_tokens = 32;
  req.round_timeout = std::chrono::milliseconds(200);
  const Result r = client->generate_ids(prompt(), req);
  EXPECT_EQ(r.ids, test::demo_target_ids_of(prompt(), req));
  EXPECT_EQ(r.stats.failovers, 1);
  EXPECT_EQ(r.stats.server_rounds, 0);
  EXPECT_EQ(r.stats.fallback_rounds, r.stats.rounds);
  // The timed-out sessions were cancelled, not left behind.
  EXPECT_TRUE(test::wait_until([&] { return test::server_stats(srv.address).active_sessions() == 0; },
                               std::chrono::seconds(5)));
}

// A server back on the port with another model must not take the
// generation: it stays local, with the target's tokens.
TEST(Failover, AServerBackWithAnotherModelKeepsTheGenerationLocal) {
  TempDir tmp;
  std::unique_ptr<test::Child> server;
  const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server);
  auto client = Client::connect(edge_options(address, "model"));
  const Request req = long_request(0.0f);
  int seen = 0;
  std::string restart_error;
  const Result r = client->generate_ids(prompt(), req, [&](int32_t) {
    if (++seen == 10) {
      test::kill_server(*server);
    }
    if (seen == 30) {
      restart_error = test::restart_server_at(address, test::demo_draft_dir(), tmp, server);
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
    }
  });
  ASSERT_EQ(restart_error, "");
  EXPECT_EQ(r.ids, test::demo_target_ids_of(prompt(), req));
  EXPECT_EQ(r.stats.failovers, 1);
  EXPECT_EQ(r.stats.failbacks, 0);
}

// A cancel reaches a generation waiting for its server to come back.
TEST(Failover, CancelWhileWaitingToReconnectEndsTheCall) {
  for (const std::string drafter : {"model", "none"}) {
    TempDir tmp;
    std::unique_ptr<test::Child> server;
    const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server);
    ClientOptions o = edge_options(address, drafter);
    o.fallback_target_dir.clear();  // nothing to go on with: it waits
    o.reconnect_budget = std::chrono::seconds(120);
    auto client = Client::connect(o);
    std::atomic<int> seen{0};
    Generation g = client->generate_ids_async(prompt(), long_request(0.0f), [&](int32_t) {
      if (++seen == 5) {
        test::kill_server(*server);
      }
    });
    ASSERT_TRUE(test::wait_until([&] { return seen >= 5; }, std::chrono::seconds(30)));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // now waiting for the server
    EXPECT_FALSE(g.done());
    g.cancel();
    // Far inside the 120 s budget it would otherwise wait.
    ASSERT_TRUE(g.wait_for(std::chrono::seconds(10))) << drafter;
    EXPECT_EQ(g.get().finish_reason, "cancelled") << drafter;
  }
}

TEST(Failover, AFallbackThatIsNotTheServersTargetIsRefused) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  ClientOptions o = edge_options(srv.address, "model");
  o.fallback_target_dir = test::demo_draft_dir();
  test::expect_connect_refused(o, "is not server");
  o.fallback_target_dir = "/nonexistent/target";
  test::expect_connect_refused(o, "/nonexistent/target");
  // The same model at another weight type would change the tokens after a
  // failover; a byte-identical copy is the same target.
  TempDir copies;
  Model::load(test::demo_target_dir())->save(copies.str("q4_0"), WType::Q4_0);
  o.fallback_target_dir = copies.str("q4_0");
  test::expect_connect_refused(o, "weights digest");
  Model::load(test::demo_target_dir())->save(copies.str("f32"));
  o.fallback_target_dir = copies.str("f32");
  EXPECT_NO_THROW(Client::connect(o));
  o = edge_options(srv.address, "model");
  o.verifier = VerifierKind::kLocal;
  o.target_dir = test::demo_target_dir();
  test::expect_connect_refused(o, "the local verifier has its target already");
}

// A fallback streamed from disk has the identity it would have in memory
// (its digest computed once from its files and kept beside them), so a
// server serving another copy of it is refused as for an in-memory one.
TEST(Failover, AStreamedFallbackHasTheInMemoryIdentity) {
  TempDir dir;
  Model::load(test::demo_target_dir())->save(dir.str("f16"));
  Model::load(test::demo_target_dir())->save(dir.str("q8_0"), WType::Q8_0);
  for (const char* m : {"f16", "q8_0"})
    std::filesystem::copy_file(test::demo_target_dir() + "/tokenizer.model", dir.str(std::string(m) + "/tokenizer.model"));
  StreamOptions so;
  so.budget_bytes = 1 << 20;
  so.direct_io = false;
  const std::string in_memory = Model::load(dir.str("f16"))->weights_digest();
  EXPECT_EQ(Model::load_streamed(dir.str("f16"), so)->weights_digest(), in_memory);
  ASSERT_TRUE(std::filesystem::exists(dir.path() / "f16" / "weights_digest.json"));
  // Kept: a second streamed load reads it (a changed weights file would not).
  test::write_file(dir.path() / "f16" / "weights_digest.json",
                   std::regex_replace(test::read_file(dir.path() / "f16" / "weights_digest.json"),
                                      std::regex("\"digest\": \"[0-9a-f]+\""), "\"digest\": \"0123456789abcdef\""));
  EXPECT_EQ(Model::load_streamed(dir.str("f16"), so)->weights_digest(), "0123456789abcdef");
  std::filesystem::last_write_time(dir.path() / "f16" / "model.safetensors",
                                   std::filesystem::last_write_time(dir.path() / "f16" / "model.safetensors") +
                                       std::chrono::seconds(5));
  EXPECT_EQ(Model::load_streamed(dir.str("f16"), so)->weights_digest(), in_memory);

  test::LocalServer q8 = test::start_server(dir.str("q8_0"));
  ClientOptions o = edge_options(q8.address, "model");
  o.fallback_target_dir = dir.str("f16");
  o.memory_budget = "50%";
  test::expect_connect_refused(o, "weights digest");
  test::LocalServer same = test::start_server(dir.str("f16"));
  o.server = same.address;
  EXPECT_NO_THROW(Client::connect(o));
}

// A server computing with other numerics (here the portable scalar kernels in
// the server's process, this client's SIMD ones in its fallback): connecting
// warns and a generation the fallback verifies in part is marked mixed;
// under strict_numerics the pairing is refused.
TEST(Failover, AFallbackWithOtherNumericsIsMarkedMixedOrRefused) {
  if (cpu_arch() == "scalar") GTEST_SKIP() << "this CPU runs the scalar kernels: no other numerics to pair with";
  TempDir tmp;
  std::unique_ptr<test::Child> server;
  setenv("SPLITSPEC_KERNELS", "scalar", 1);
  const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server);
  unsetenv("SPLITSPEC_KERNELS");
  ClientOptions strict = edge_options(address, "model");
  strict.strict_numerics = true;
  test::expect_connect_refused(strict, "other numerics");
  auto client = Client::connect(edge_options(address, "model"));
  EXPECT_EQ(client->server_info().backend, "cpu");
  Request req = long_request(0.0f);
  req.max_new_tokens = 48;
  const Result plain = client->generate_ids(prompt(), req);
  EXPECT_EQ(plain.stats.mixed_numerics, 0) << "the server alone";
  int seen = 0;
  const Result moved = client->generate_ids(prompt(), req, [&](int32_t) {
    if (++seen == 5) test::kill_server(*server);
  });
  EXPECT_EQ(moved.stats.failovers, 1);
  EXPECT_GT(moved.stats.fallback_rounds, 0);
  EXPECT_EQ(moved.stats.mixed_numerics, 1);
}

}  // namespace
}  // namespace splitspec

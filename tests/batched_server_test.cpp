// Batched verification over real gRPC (batched_verification_test.cpp has the
// engine, the decoder and the compute worker): concurrent sessions on one
// server each get their solo output, and clients keep to the server's draft
// hint.
#include <gtest/gtest.h>

#include <thread>

#include "client/client.h"
#include "common/tokenizer/tokenizer.h"
#include "server/server.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

// Over real gRPC: eight concurrent sessions (edge-sd chains, trees and
// cloud-ar streams) on one server with batching each get their solo output,
// and the server really verified rounds of several sessions together.
TEST(BatchedServer, EightConcurrentSessionsEachGetTheirSoloGreedyOutput) {
  ServerConfig c;
  c.target_dir = test::demo_target_dir();
  c.listen = "127.0.0.1:0";
  c.max_sessions = 8;
  c.compute_threads = 1;
  c.log_level = "warn";
  c.batch_wait_ms = 5;
  Server server(c);
  server.start();
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  Tokenizer tok(test::demo_target_dir());
  Request req;
  req.max_new_tokens = 32;
  req.ignore_eos = true;
  const std::vector<std::string>& texts = test::test_prompts();
  constexpr int kSessions = 8;
  std::vector<std::vector<int32_t>> prompts, want(kSessions), got(kSessions);
  for (int i = 0; i < kSessions; ++i) prompts.push_back(test::encode_prompt(tok, texts[i % texts.size()]));
  for (int i = 0; i < kSessions; ++i) want[i] = test::demo_target_ids_of(prompts[i], req);
  std::vector<std::string> errors(kSessions);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i)
    threads.emplace_back([&, i] {
      try {
        ClientOptions o;
        o.server = address;
        o.draft_dir = test::demo_draft_dir();
        o.threads = 1;
        o.verifier = VerifierKind::kServer;
        o.drafter = i % 4 == 3 ? "none" : i % 4 == 1 ? "model-tree" : "model";
        Request r = req;
        r.gamma = 2 + i % 4;
        got[i] = Client::connect(o)->generate_ids(prompts[i], r).ids;
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) {
    EXPECT_EQ(errors[i], "") << "session " << i;
    EXPECT_EQ(got[i], want[i]) << "session " << i;
  }
  // Batches of more than one round happened: fewer forwards of one round
  // than forwards.
  const std::string metrics = server.metrics_text();
  auto value = [&](const std::string& line) {
    const size_t at = metrics.find(line + " ");
    EXPECT_NE(at, std::string::npos) << line << " in\n" << metrics;
    return at == std::string::npos ? 0.0 : std::stod(metrics.substr(at + line.size() + 1));
  };
  const double forwards = value("splitspec_batch_size_rounds_count");
  const double single = value("splitspec_batch_size_rounds_bucket{le=\"1\"}");
  EXPECT_GT(forwards, 0);
  EXPECT_LT(single, forwards) << metrics;
  server.shutdown();
}

// Under load the verdicts advise a shorter draft and the client keeps to
// it: with a row budget of 3 a lone session is told 2, whatever its gamma.
// Prompts longer than that budget are prefilled in chunks. Output is exact
// either way.
TEST(BatchedServer, ClientsFollowTheServersDraftHint) {
  for (const std::string hint : {"auto", "off"}) {
    ServerConfig c;
    c.target_dir = test::demo_target_dir();
    c.listen = "127.0.0.1:0";
    c.compute_threads = 1;
    c.log_level = "warn";
    c.max_batch_rows = 3;
    c.draft_hint = hint;
    Server server(c);
    server.start();
    ClientOptions o;
    o.verifier = VerifierKind::kServer;
    o.drafter = "model";
    o.server = "127.0.0.1:" + std::to_string(server.port());
    o.draft_dir = test::demo_draft_dir();
    o.threads = 1;
    Request req;
    req.max_new_tokens = 24;
    req.ignore_eos = true;
    req.gamma = 6;
    const Tokenizer tok(test::demo_target_dir());
    const std::vector<int32_t> prompt = test::encode_prompt(tok, "Call me Ishmael. Some years ago");
    const Result r = Client::connect(o)->generate_ids(prompt, req);
    EXPECT_EQ(r.ids, test::demo_target_ids_of(prompt, req)) << hint;
    // The first round drafts before any verdict has advised.
    if (hint == "auto") {
      EXPECT_LE(r.stats.drafted_tokens, 6 + 2 * (r.stats.rounds - 1));
    } else {
      EXPECT_GT(r.stats.drafted_tokens, 6 + 2 * (r.stats.rounds - 1));
    }
    EXPECT_NE(server.metrics_text().find("splitspec_prefill_chunks_total"), std::string::npos);
    server.shutdown();
  }
}

}  // namespace
}  // namespace splitspec

// The client's end of a Session stream against a real server on loopback:
// messages in order, responses queued for next(), early verdicts to their
// handler on gRPC's thread, a handler's refusal cancelling the call, and a
// stream dropped mid-session freeing its server session.
#include "client/session_stream.h"

#include <gtest/gtest.h>

#include <atomic>

#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

using test::TempDir;

v1::SessionRequest open_msg(bool early) {
  v1::SessionRequest m;
  v1::GenerationRequest* o = m.mutable_open();
  for (int32_t t : {1, 4, 9}) o->add_prompt_ids(t);
  o->set_max_new_tokens(6);
  o->set_ignore_eos(true);
  o->set_vocab_size(12);
  o->set_early_verdicts(early);
  return m;
}

v1::SessionRequest draft_msg(uint32_t round, std::vector<int32_t> tokens, bool early = false) {
  v1::SessionRequest m;
  m.mutable_draft()->set_round(round);
  m.mutable_draft()->mutable_tokens()->Add(tokens.begin(), tokens.end());
  m.mutable_draft()->set_early_verdicts(early);
  return m;
}

std::chrono::system_clock::time_point soon() { return std::chrono::system_clock::now() + std::chrono::seconds(30); }

struct TinyServer {
  TempDir dir;
  test::LocalServer srv;
  std::unique_ptr<v1::SplitSpec::Stub> stub;
  TinyServer() {
    Model::random(test::tiny_config(12, 3), 5)->save(dir.str("target"));
    srv = test::start_server(dir.str("target"));
    stub = test::raw_stub(srv.address);
  }
};

TEST(SessionStream, RoundsInOrderUntilTheServerEndsTheCallOk) {
  TinyServer s;
  SessionStream stream(*s.stub, soon());
  stream.send(open_msg(false));
  stream.send(draft_msg(1, {3, 4}));  // pipelined right behind Open
  std::optional<v1::SessionResponse> r = stream.next();
  ASSERT_TRUE(r && r->has_opened());
  r = stream.next();
  ASSERT_TRUE(r && r->has_verdict());
  EXPECT_EQ(r->verdict().round(), 1u);
  int32_t generated = r->verdict().tokens_size();
  for (uint32_t round = 2; generated < 6; ++round) {
    stream.send(draft_msg(round, {}));
    r = stream.next();
    ASSERT_TRUE(r && r->has_verdict());
    EXPECT_EQ(r->verdict().round(), round);
    generated += r->verdict().tokens_size();
  }
  EXPECT_EQ(r->verdict().finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_FALSE(stream.next().has_value()) << "the server ended the call";
  EXPECT_TRUE(stream.status().ok()) << stream.status().error_message();
  stream.send(draft_msg(99, {}));  // after the end: ignored, no crash
}

// With the demo target (trained exits, a forward long enough for early
// verdicts to leave before the final one; a server drops those still queued
// when the final verdict is in, so a round may carry none).
TEST(SessionStream, EarlyVerdictsGoToTheHandlerAndARefusalCancelsTheCall) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  auto stub = test::raw_stub(srv.address);
  auto open = [] {
    v1::SessionRequest m;
    v1::GenerationRequest* o = m.mutable_open();
    for (int32_t t : {1, 345, 1046, 6803}) o->add_prompt_ids(t);
    o->set_max_new_tokens(60);
    o->set_ignore_eos(true);
    o->set_vocab_size(8000);
    o->set_early_verdicts(true);
    return m;
  };
  std::atomic<int> early{0};
  {
    SessionStream stream(*stub, soon(), [&](const v1::RoundVerdict& v) {
      EXPECT_FALSE(v.final());
      early += 1;
      return true;
    });
    stream.send(open());
    ASSERT_TRUE(stream.next().has_value());  // Opened
    for (uint32_t round = 1; round <= 30 && early.load() == 0; ++round) {
      stream.send(draft_msg(round, {11, 12, 13}, true));
      const std::optional<v1::SessionResponse> r = stream.next();
      ASSERT_TRUE(r && r->has_verdict());
      EXPECT_TRUE(r->verdict().final()) << "next() sees final verdicts only";
    }
    EXPECT_GE(early.load(), 1);
  }
  // A handler that refuses (a malformed verdict) ends the call at once.
  SessionStream refusing(*stub, soon(), [](const v1::RoundVerdict&) { return false; });
  refusing.send(open());
  for (uint32_t round = 1;; ++round) {
    std::optional<v1::SessionResponse> r = refusing.next();
    if (!r) break;
    if (r->has_verdict() && r->verdict().finish_reason() != v1::FINISH_REASON_UNSPECIFIED) break;
    refusing.send(draft_msg(round, {11, 12, 13}, true));
  }
  EXPECT_EQ(refusing.status().error_code(), grpc::StatusCode::CANCELLED);
}

TEST(SessionStream, DroppingAnOpenStreamFreesItsServerSession) {
  TinyServer s;
  {
    SessionStream stream(*s.stub, soon());
    stream.send(open_msg(false));
    ASSERT_TRUE(stream.next().has_value());
    EXPECT_EQ(s.srv.server->active_sessions(), 1);
  }
  EXPECT_TRUE(test::wait_until([&] { return s.srv.server->active_sessions() == 0; }, std::chrono::seconds(10)));
}

TEST(SessionStream, ADeadlineEndsAWaitThatWouldNeverEnd) {
  TinyServer s;
  SessionStream stream(*s.stub, std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  stream.send(open_msg(false));
  ASSERT_TRUE(stream.next().has_value());  // Opened; no Draft follows, so no verdict ever comes
  EXPECT_FALSE(stream.next().has_value());
  EXPECT_EQ(stream.status().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

}  // namespace
}  // namespace splitspec

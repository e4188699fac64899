// The Session protocol spoken raw to a server in this process: a cancel
// ends the session, and a tree draft is verified as a tree.
#include <gtest/gtest.h>

#include "client/client.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

using test::draft_msg;
using test::open_msg;
using test::run_session;

// Cancel ends the session with CANCELLED and frees it; a tree draft is
// verified as a tree: the branch that matches the target is accepted.
TEST(EdgeCloudProtocol, CancelEndsTheSessionAndTreeDraftsAreVerified) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  auto stub = test::raw_stub(srv.address);
  v1::SessionRequest cancel;
  cancel.mutable_cancel();
  const grpc::Status s = run_session(*stub, {open_msg({1, 5}), cancel});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();

  // The target's own greedy continuation, for reference.
  ClientOptions o;
  o.mode = Mode::kCloudAr;
  o.server = srv.address;
  auto cloud = Client::connect(o);
  Request req;
  req.max_new_tokens = 4;
  req.ignore_eos = true;
  const std::vector<int32_t> prompt = {1, 345, 1046};
  const std::vector<int32_t> want = cloud->generate_ids(prompt, req).ids;
  ASSERT_EQ(want.size(), 4u);
  // Tree: node 0 a wrong first token, node 1 the right one with node 2 (right)
  // and node 3 (wrong) below it.
  const int32_t wrong = (want[0] + 1) % 8000, wrong2 = (want[1] + 1) % 8000;
  v1::SessionRequest d = draft_msg(1, {wrong, want[0], wrong2, want[1]});
  for (int32_t p : {-1, -1, 1, 1}) d.mutable_draft()->add_parents(p);
  v1::SessionRequest open = open_msg(prompt);
  open.mutable_open()->set_max_new_tokens(4);
  open.mutable_open()->set_ignore_eos(true);
  grpc::ClientContext ctx;
  auto stream = stub->Session(&ctx);
  ASSERT_TRUE(stream->Write(open));
  ASSERT_TRUE(stream->Write(d));
  v1::SessionResponse r;
  ASSERT_TRUE(stream->Read(&r));
  ASSERT_TRUE(r.has_opened());
  ASSERT_TRUE(stream->Read(&r));
  ASSERT_TRUE(r.has_verdict());
  EXPECT_EQ(r.verdict().accepted(), 2);
  EXPECT_EQ(std::vector<int32_t>(r.verdict().path().begin(), r.verdict().path().end()), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(std::vector<int32_t>(r.verdict().tokens().begin(), r.verdict().tokens().end()),
            (std::vector<int32_t>{want[0], want[1], want[2]}));
  // The cache holds the accepted path only: the next round continues exactly.
  ASSERT_TRUE(stream->Write(draft_msg(2, {})));
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.verdict().tokens(0), want[3]);
  EXPECT_EQ(r.verdict().finish_reason(), v1::FINISH_REASON_LENGTH);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_TRUE(test::wait_until([&] { return srv.server->active_sessions() == 0; }, std::chrono::seconds(10)));
}

}  // namespace
}  // namespace splitspec

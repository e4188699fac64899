// The reconnect policy both server roads share (client/reconnector.h): a
// window from the first break since the server answered, a refused server
// given up on at once when asked, a stop that ends the wait, and a server
// that is there found at once.
#include "client/reconnector.h"

#include <gtest/gtest.h>

#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

TEST(Reconnector, WaitsWithinItsWindowFromTheFirstBreakAndStopsWhenAsked) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  ServerLink link(srv.address, std::chrono::milliseconds(3000));
  Reconnector r(link);
  r.start(std::chrono::milliseconds(2000), std::chrono::steady_clock::now() + std::chrono::seconds(60));
  EXPECT_FALSE(r.since());
  EXPECT_TRUE(r.broke());
  const auto first = r.since();
  ASSERT_TRUE(first);
  EXPECT_FALSE(r.broke()) << "the window counts from the first break";
  EXPECT_EQ(r.since(), first);
  EXPECT_TRUE(r.reconnect(true, {})) << "a server that is there";
  r.answered();
  EXPECT_FALSE(r.since());

  srv.server->shutdown();
  srv.server.reset();
  r.broke();
  EXPECT_FALSE(r.reconnect(true, {})) << "refused, and told to give up on a refusal";
  EXPECT_FALSE(r.reconnect(false, [] { return true; })) << "stopped";
  // A window already spent: no wait at all.
  Reconnector spent(link);
  spent.start(std::chrono::milliseconds(0), std::chrono::steady_clock::now() + std::chrono::seconds(60));
  spent.broke();
  EXPECT_FALSE(spent.reconnect(false, {}));
}

}  // namespace
}  // namespace splitspec

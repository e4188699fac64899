// The HTTP door's record of failed tokens (server/failed_tokens.h): a peer
// that guesses waits longer each time, and only trusted proxies name the
// client.
#include "server/failed_tokens.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace splitspec::http {
namespace {

TEST(FailedTokens, APeerGuessingWaitsLongerEachTimeAndIsForgotten) {
  FailedTokens f;
  const auto t0 = FailedTokens::Clock::now();
  for (int i = 0; i < FailedTokens::kFree; ++i) EXPECT_EQ(f.failed("a", t0).count(), 0);
  EXPECT_EQ(f.failed("a", t0), FailedTokens::kFirstDelay);
  EXPECT_EQ(f.wait("a", t0), FailedTokens::kFirstDelay);
  EXPECT_EQ(f.wait("b", t0).count(), 0) << "another peer is not delayed";
  EXPECT_EQ(f.failed("a", t0), 2 * FailedTokens::kFirstDelay);
  for (int i = 0; i < 20; ++i) f.failed("a", t0);
  EXPECT_EQ(f.wait("a", t0), FailedTokens::kMaxDelay);
  EXPECT_EQ(f.wait("a", t0 + FailedTokens::kMaxDelay).count(), 0) << "a delay, not a lockout";
  EXPECT_EQ(f.failed("a", t0 + FailedTokens::kMaxDelay + FailedTokens::kForget + std::chrono::seconds(1)).count(), 0);
}

TEST(FailedTokens, OnlyTrustedProxiesNameTheClient) {
  const std::vector<std::string> trusted = {"10.0.0.1", "10.0.0.2"};
  EXPECT_EQ(FailedTokens::key("1.2.3.4", "5.6.7.8", trusted), "1.2.3.4") << "an untrusted peer's header is ignored";
  EXPECT_EQ(FailedTokens::key("10.0.0.1", "5.6.7.8", trusted), "5.6.7.8");
  EXPECT_EQ(FailedTokens::key("10.0.0.1", "9.9.9.9, 5.6.7.8, 10.0.0.2", trusted), "5.6.7.8")
      << "the rightmost hop a trusted proxy did not add";
  EXPECT_EQ(FailedTokens::key("10.0.0.1", "", trusted), "10.0.0.1");
}

}  // namespace
}  // namespace splitspec::http

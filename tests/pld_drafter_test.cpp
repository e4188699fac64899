// The `pld` drafter (prompt lookup): it proposes what followed the latest
// earlier occurrence of the sequence's suffix.
#include <gtest/gtest.h>

#include "common/drafting/registry.h"
#include "common/util/error.h"

namespace splitspec {
namespace {

TEST(PldDrafter, ProposesWhatFollowedTheLatestMatch) {
  DrafterSpec spec;
  spec.vocab_size = 50;
  auto d = find_drafter("pld").make(spec);
  DraftParams params;
  params.gamma = 4;
  d->begin({1, 2, 3, 4, 9, 1, 2}, params);
  // (4, 9... no; the suffix (1, 2) last occurred at the start.
  EXPECT_EQ(d->propose(16).tokens, (std::vector<int32_t>{3, 4, 9, 1}));
  EXPECT_EQ(d->propose(2).tokens, (std::vector<int32_t>{3, 4}));
  const DraftTree sent = d->propose(4);
  Verdict v;
  v.accepted = 1;
  v.path = {0};
  v.tokens = {3, 7};
  d->accept({sent, v, VerdictExtras{}});
  // History ends (2, 3, 7): no earlier 7, so nothing to propose.
  EXPECT_EQ(d->propose(4).size(), 0);
  spec.options = {{"ngram_min", "0"}};
  EXPECT_THROW(find_drafter("pld").make(spec), Error);
}

}  // namespace
}  // namespace splitspec

// Stats' parts (client.h): each lists every field once, and a sum adds the
// counts and recomputes the means, rates and percentiles from them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "client/cli/stats_json.h"
#include "client/client.h"

namespace splitspec {
namespace {

// A field missing from its part's list would be neither summed, printed nor
// shown to Python. The parts hold only 8-byte scalars and containers, so
// their listed fields fill them exactly.
template <class Part>
size_t listed_bytes() {
  size_t bytes = 0;
  Part::fields([&bytes](const char*, auto member, Merge) {
    using M = std::decay_t<decltype(std::declval<Part&>().*member)>;
    bytes += sizeof(M);
  });
  return bytes;
}

TEST(Stats, EveryPartListsEachOfItsFields) {
  EXPECT_EQ(listed_bytes<TimingStats>(), sizeof(TimingStats));
  EXPECT_EQ(listed_bytes<DraftStats>(), sizeof(DraftStats));
  EXPECT_EQ(listed_bytes<TargetStats>(), sizeof(TargetStats));
  EXPECT_EQ(listed_bytes<LinkStats>(), sizeof(LinkStats));
  EXPECT_EQ(listed_bytes<PredraftStats>(), sizeof(PredraftStats));
  EXPECT_EQ(listed_bytes<FaultStats>(), sizeof(FaultStats));
  size_t parts = 0;
  const Stats s;
  Stats::parts(s, [&parts](const char*, const auto& part) { parts += sizeof(part); });
  EXPECT_EQ(parts, sizeof(Stats)) << "every part is visited";
}

Stats generation(int64_t tokens, int64_t rounds, int64_t drafted, int64_t accepted, double wall_ms,
                 std::vector<double> token_ms) {
  Stats s;
  s.new_tokens = tokens;
  s.rounds = rounds;
  s.drafted_tokens = drafted;
  s.accepted_tokens = accepted;
  s.wall_ms = wall_ms;
  s.token_ms = std::move(token_ms);
  s.derive();
  return s;
}

TEST(Stats, ASumRecomputesRatesFromTheSumsNotFromTheMeans) {
  const Stats a = generation(10, 2, 8, 8, 100, {1, 2, 3});
  const Stats b = generation(30, 20, 80, 10, 200, {10});
  EXPECT_DOUBLE_EQ(a.tau, 5.0);
  EXPECT_DOUBLE_EQ(b.tau, 1.5);
  Stats total;
  total += a;
  total += b;
  EXPECT_EQ(total.new_tokens, 40);
  EXPECT_EQ(total.rounds, 22);
  EXPECT_DOUBLE_EQ(total.tau, 40.0 / 22.0) << "not the mean of 5 and 1.5";
  EXPECT_DOUBLE_EQ(total.acceptance_rate, 18.0 / 88.0);
  EXPECT_DOUBLE_EQ(total.accepted_per_round, 18.0 / 22.0);
  EXPECT_DOUBLE_EQ(total.tree_nodes, 88.0 / 22.0);
  EXPECT_DOUBLE_EQ(total.ms_per_token, 300.0 / 40.0);
  EXPECT_EQ(total.token_ms, (std::vector<double>{1, 2, 3, 10}));
  EXPECT_DOUBLE_EQ(total.token_ms_max, 10);
  EXPECT_DOUBLE_EQ(total.token_ms_p50, 2);
}

TEST(Stats, PeaksLevelsAndPerPositionCountsAddUpAsTheyShould) {
  Stats a, b;
  a.weight_memory_peak = 500;
  b.weight_memory_peak = 300;
  a.final_alpha = 0.2;
  b.final_alpha = 0.4;
  a.proposed_per_position = {4, 2};
  a.accepted_per_position = {2, 1};
  b.proposed_per_position = {4, 4, 2};
  b.accepted_per_position = {4, 0, 2};
  a.drafter_counters = {{"lut_bytes", 100}, {"pld_matches", 3}};
  b.drafter_counters = {{"lut_bytes", 120}, {"pld_matches", 4}};
  a.predraft_lookups = 4;
  a.predraft_hits = 3;
  a.exit_layer_sum = 9;
  a.hit_sends = 2;
  a.hit_send_total_ms = 2;
  b.predraft_lookups = 4;
  b.predraft_hits = 1;
  b.exit_layer_sum = 7;
  b.hit_sends = 2;
  b.hit_send_total_ms = 6;
  a += b;
  EXPECT_EQ(a.weight_memory_peak, 500u);
  EXPECT_DOUBLE_EQ(a.final_alpha, 0.4);
  EXPECT_EQ(a.proposed_per_position, (std::vector<int64_t>{8, 6, 2}));
  EXPECT_EQ(a.acceptance_per_position, (std::vector<double>{0.75, 1.0 / 6.0, 1.0}));
  EXPECT_DOUBLE_EQ(a.drafter_counters["lut_bytes"], 120);
  EXPECT_DOUBLE_EQ(a.drafter_counters["pld_matches"], 7);
  EXPECT_DOUBLE_EQ(a.cache_miss_rate, 0.5);
  EXPECT_DOUBLE_EQ(a.avg_exit_layer, 4.0);
  EXPECT_DOUBLE_EQ(a.hit_send_ms, 2.0);
}

TEST(Stats, EachPartsJsonIsItsFieldList) {
  Stats s = generation(10, 2, 8, 8, 100, {1, 2});
  s.resumes = 3;
  nlohmann::json faults;
  add_json<FaultStats>(faults, s);
  EXPECT_EQ(faults.size(), 10u);
  EXPECT_EQ(faults["resumes"], 3);
  const nlohmann::json all = to_json(s);
  EXPECT_DOUBLE_EQ(all["tau"].get<double>(), 5.0);
  EXPECT_EQ(all["token_ms"].size(), 2u);
  size_t fields = 0;
  Stats::parts(s, [&fields](const char*, const auto& part) {
    std::decay_t<decltype(part)>::fields([&fields](const char*, auto, Merge) { fields += 1; });
  });
  EXPECT_EQ(all.size(), fields) << "no two parts share a name";
}

}  // namespace
}  // namespace splitspec

// Deployment-regime emulation (docs/edge-cloud.md): a slower server
// accelerator (--emulate-forward-ms) and a slower edge device
// (--emulate-draft-factor) change times, never tokens, and say so.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "common/backend/cpu_backend.h"
#include "client/client.h"
#include "client/request_options.h"
#include "common/decoding/forward_emulation.h"
#include "common/decoding/target_decoder.h"
#include "common/model/model.h"
#include "common/util/error.h"
#include "common/util/stopwatch.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

TEST(Emulation, ForwardSpecIsFixedAndPerRowMillisecondsAndBadOnesAreRefused) {
  const ForwardEmulation e = ForwardEmulation::parse("30:0.3");
  EXPECT_DOUBLE_EQ(e.fixed_ms, 30);
  EXPECT_DOUBLE_EQ(e.per_row_ms, 0.3);
  EXPECT_DOUBLE_EQ(e.modeled_ms(10), 33);
  EXPECT_EQ(e.spec(), "30:0.3");
  EXPECT_DOUBLE_EQ(ForwardEmulation::parse("12").fixed_ms, 12);
  EXPECT_DOUBLE_EQ(ForwardEmulation::parse("12").per_row_ms, 0);
  EXPECT_FALSE(ForwardEmulation::parse("off").enabled());
  EXPECT_FALSE(ForwardEmulation::parse("").enabled());
  EXPECT_EQ(ForwardEmulation{}.spec(), "off");
  for (const char* bad : {"fast", "-1", "30:", ":1", "30:0.3:1", "1e9", "nan", "inf", "30;1"}) {
    try {
      ForwardEmulation::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("emulate_forward_ms"), std::string::npos) << e.what();
    }
  }
}

// The modeled time is a floor: the forward takes at least it, the taps
// (early exits) come at their layer's share of it, and the verdict is the
// one without emulation.
TEST(Emulation, ForwardTakesItsModeledTimeWithItsLayersPacedAcrossIt) {
  const auto model = Model::load(test::demo_target_dir());
  const CpuBackend cpu(model);
  const Backend* target = &cpu;
  const int64_t layers = target->config().num_hidden_layers;
  const std::vector<int32_t> prompt = {1, 450, 6673, 310};
  GenerateOptions o;
  o.max_new_tokens = 8;
  const DraftTree draft = DraftTree::chain({263, 931, 297});

  TargetDecoder plain(*target, prompt, o);
  const RoundResult want = plain.verify(draft);

  TargetDecoder emulated(*target, prompt, o);
  const ForwardEmulation e{40, 0.5};
  std::vector<std::pair<int64_t, double>> taps;
  SteadyClock::time_point start;
  TargetDecoder::RoundRequest req;
  req.tap_layers = {2, 4, 6};
  req.tap = [&](int64_t after, RowsView, const Rng&) { taps.emplace_back(after, ms_since(start)); };
  start = SteadyClock::now();
  const RoundResult got = TargetDecoder::verify_batch({{&emulated, &draft, &req}}, {}, e)[0];
  const double wall = ms_since(start);
  // The round's rows: the prompt (its first forward) and the draft.
  const double modeled = e.modeled_ms(static_cast<int64_t>(prompt.size()) + draft.size());
  EXPECT_EQ(got.verdict.tokens, want.verdict.tokens);
  EXPECT_EQ(got.verdict.accepted, want.verdict.accepted);
  EXPECT_EQ(emulated.sequence(), plain.sequence());
  EXPECT_GE(got.forward_ms, modeled);
  EXPECT_GE(wall, modeled);
  ASSERT_EQ(taps.size(), 3u);
  for (const auto& [after, at] : taps)
    EXPECT_GE(at, modeled * static_cast<double>(after) / static_cast<double>(layers) - 0.5) << "exit after layer " << after;
  EXPECT_LT(taps.front().second, modeled * 0.75) << "an early exit must not wait for the whole forward";
}

// Through a real server and clients: cloud-ar, edge-sd and edge-fsd with
// both emulations give the target's own greedy tokens, the server's forward
// times are at least the modeled ones, and every result says it is emulated.
TEST(Emulation, EmulatedServerAndDeviceGiveTheTargetsTokensAndSaySo) {
  ServerConfig c;
  c.target_dir = test::demo_target_dir();
  c.emulate_forward = ForwardEmulation{3, 0.1};
  test::LocalServer srv = test::start_server(std::move(c));
  const auto target = Model::load(test::demo_target_dir());
  for (Mode mode : {Mode::kCloudAr, Mode::kEdgeSd, Mode::kEdgeFsd}) {
    ClientOptions o = with_mode(ClientOptions{}, mode);
    o.server = srv.address;
    o.draft_dir = test::demo_draft_dir();
    o.threads = 1;
    o.emulate_draft_factor = 3;
    auto client = Client::connect(o);
    EXPECT_EQ(client->server_info().emulated_forward_ms, "3:0.1");
    for (int p = 0; p < 2; ++p) {
      Request req;
      req.max_new_tokens = 24;
      const Result got = client->generate(test::test_prompts()[p], req);
      const test::Reference want = test::target_alone(*target, got.prompt_ids, to_generate_options(req));
      ASSERT_EQ(got.ids, want.output_ids) << mode_name(o) << " prompt " << p;
      EXPECT_DOUBLE_EQ(got.stats.emulated_forward_fixed_ms, 3);
      EXPECT_DOUBLE_EQ(got.stats.emulated_forward_per_row_ms, 0.1);
      EXPECT_GE(got.stats.server_forward_ms, 3.0 * static_cast<double>(got.stats.target_forwards));
      if (mode == Mode::kCloudAr) continue;
      EXPECT_DOUBLE_EQ(got.stats.emulated_draft_factor, 3);
      EXPECT_GT(got.stats.draft_bytes, 0) << "drafts sent upstream are counted";
    }
  }
}

TEST(Emulation, DraftFactorOutOfRangeIsRefusedAtConnect) {
  for (double bad : {0.5, 0.0, -1.0, 1e6}) {
    ClientOptions o = with_mode(ClientOptions{}, Mode::kLocalSd);
    o.target_dir = test::demo_target_dir();
    o.draft_dir = test::demo_draft_dir();
    o.emulate_draft_factor = bad;
    try {
      Client::connect(o);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("emulate_draft_factor must be in [1, 1000]"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace splitspec

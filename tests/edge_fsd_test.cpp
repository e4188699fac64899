// Edge-cloud decoding with early exits and pre-drafting (edge-fsd) over real
// gRPC: the output is the target's own, and early verdicts stream as the
// protocol promises.
#include <gtest/gtest.h>

#include "client/client.h"
#include "client/request_options.h"
#include "common/early_exit/early_exit.h"
#include "common/tokenizer/tokenizer.h"
#include "common/train/exit_trainer.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

using test::LocalServer;
using test::TempDir;

ClientOptions fsd_options(const std::string& address, const std::string& draft, int threads = 1,
                          const std::string& queue = "priority", bool adaptive = false) {
  ClientOptions o;
  o.mode = Mode::kEdgeFsd;
  o.server = address;
  o.draft_dir = draft;
  o.predraft_threads = threads;
  o.predraft_queue = queue;
  o.predraft_adaptive = adaptive;
  return o;
}

TEST(EdgeFsd, GreedyOutputIsTheTargetsAndEdgeSdsOnManyPrompts) {
  LocalServer srv = test::start_server(test::demo_target_dir());
  auto target = Model::load(test::demo_target_dir());
  Tokenizer tok(test::demo_target_dir());
  ClientOptions sd_opts = fsd_options(srv.address, test::demo_draft_dir());
  sd_opts.mode = Mode::kEdgeSd;
  auto sd = Client::connect(sd_opts);
  int64_t hits = 0, rounds = 0, early = 0;
  int run = 0;
  for (const std::string& text : test::test_prompts()) {
    const std::vector<int32_t> prompt = test::encode_prompt(tok, text);
    Request req;
    req.max_new_tokens = 40;
    req.ignore_eos = true;
    const test::Reference want = test::target_alone(*target, prompt, to_generate_options(req));
    // Vary gamma, worker count and queue policy across prompts; every other
    // prompt with the adaptive switch, whose blocks mix rounds with and
    // without pre-drafting.
    const int threads = 1 + run % 3;
    const std::string queue = run % 3 == 0 ? "priority" : (run % 3 == 1 ? "fifo" : "random");
    const bool adaptive = run % 2 == 1;
    req.gamma = 2 + run % 5;
    ++run;
    auto fsd = Client::connect(fsd_options(srv.address, test::demo_draft_dir(), threads, queue, adaptive));
    const Result got = fsd->generate_ids(prompt, req);
    ASSERT_EQ(got.ids, want.output_ids) << "'" << text << "' gamma " << req.gamma << " threads " << threads << " " << queue
                                        << (adaptive ? " adaptive" : "");
    EXPECT_EQ(sd->generate_ids(prompt, req).ids, got.ids);
    rounds += got.stats.predraft_lookups;
    hits += got.stats.predraft_hits;
    early += got.stats.early_verdicts;
  }
  EXPECT_GT(early, 0);
  EXPECT_GT(hits, 0) << "no round was served from the pre-draft cache";
  EXPECT_LE(hits, rounds);
  EXPECT_TRUE(test::wait_until([&] { return srv.server->active_sessions() == 0; }, std::chrono::seconds(10)));
}

TEST(EdgeFsd, SampledOutputHasTheTargetsDistribution) {
  TempDir dir;
  constexpr int64_t kVocab = 12;
  const ModelConfig tc = test::tiny_config(kVocab, 3);
  Model::random(tc, 31)->save(dir.str("target"));
  init_exits(tc, {1, 2}, 8, 5).save(dir.str("target"));
  Model::random(test::tiny_config(kVocab, 1), 32)->save(dir.str("draft"));
  LocalServer srv = test::start_server(dir.str("target"));
  auto client = Client::connect(fsd_options(srv.address, dir.str("draft")));
  auto target = Model::load(dir.str("target"));
  const std::vector<int32_t> prompt = {1, 4, 9};
  Request req;
  req.max_new_tokens = 3;
  req.ignore_eos = true;
  req.gamma = 1;  // short rounds: the second token often comes from a pre-drafted round
  req.temperature = 0.05f;
  int64_t hits = 0;
  test::expect_targets_two_token_distribution(*client, *target, prompt, req, 3000, 5000, [&](const Result& r) {
    EXPECT_EQ(r.ids.size(), 3u);
    hits += r.stats.predraft_hits;
  });
  EXPECT_GT(hits, 100) << "pre-drafted rounds must be part of what is tested";
}

// Near the context's end a round carries fewer tokens than gamma. A
// pre-drafted hit there fits the round it is sent in, the drafter counts only
// what was verified, and the output stops at the context, as the target's.
TEST(EdgeFsd, PredraftedHitsNearTheContextEndFitAndCountOnlyWhatWasSent) {
  TempDir dir;
  constexpr int64_t kVocab = 12;
  const ModelConfig tc = test::tiny_config(kVocab, 3);  // context 64
  Model::random(tc, 31)->save(dir.str("target"));
  init_exits(tc, {1, 2}, 8, 5).save(dir.str("target"));
  Model::random(test::tiny_config(kVocab, 1), 32)->save(dir.str("draft"));
  LocalServer srv = test::start_server(dir.str("target"));
  auto client = Client::connect(fsd_options(srv.address, dir.str("draft")));
  Request req;
  req.max_new_tokens = 100;  // past the context: every generation stops there
  req.ignore_eos = true;
  req.gamma = 4;
  req.temperature = 0.05f;
  int64_t hits = 0;
  for (int i = 0; i < 200; ++i) {
    std::vector<int32_t> prompt = {1};
    while (prompt.size() < 57) prompt.push_back(static_cast<int32_t>(3 + (prompt.size() * 7 + i) % 9));
    req.seed = 500 + i;
    const Result r = client->generate_ids(prompt, req);
    ASSERT_EQ(r.ids.size(), 7u);
    EXPECT_EQ(r.finish_reason, "context");
    ASSERT_LE(r.stats.acceptance_per_position.size(), 4u);
    for (double a : r.stats.acceptance_per_position) {
      EXPECT_GE(a, 0.0);
      EXPECT_LE(a, 1.0);
    }
    EXPECT_LE(r.stats.acceptance_rate, 1.0);
    EXPECT_LE(r.stats.predraft_waited_hits, r.stats.predraft_hits);
    hits += r.stats.predraft_hits;
  }
  EXPECT_GT(hits, 0) << "pre-drafted rounds near the end must be part of what is tested";
}

// The stream itself: early verdicts before the final one, never two with the
// same tokens in a round, each from a real exit; none unless asked for. A
// round may carry none (the server drops those still queued when its final
// verdict is ready), so rounds run until some have come.
TEST(EdgeFsd, EarlyVerdictsComeFirstDistinctAndOnlyWhenAsked) {
  LocalServer srv = test::start_server(test::demo_target_dir());
  auto stub = test::raw_stub(srv.address);
  grpc::ClientContext ctx0;
  v1::ServerInfo info;
  ASSERT_TRUE(stub->GetInfo(&ctx0, v1::GetInfoRequest{}, &info).ok());
  ASSERT_FALSE(info.early_exit_layers().empty()) << "the demo target ships early exits";
  for (bool ask : {true, false}) {
    grpc::ClientContext ctx;
    auto s = stub->Session(&ctx);
    v1::SessionRequest open;
    v1::GenerationRequest* o = open.mutable_open();
    for (int32_t t : {1, 345, 1046, 6803}) o->add_prompt_ids(t);
    o->set_max_new_tokens(64);
    o->set_vocab_size(8000);
    o->set_ignore_eos(true);
    o->set_early_verdicts(ask);
    ASSERT_TRUE(s->Write(open));
    v1::SessionResponse r;
    ASSERT_TRUE(s->Read(&r));
    ASSERT_TRUE(r.has_opened());
    int64_t early = 0;
    for (uint32_t round = 1; round <= 20 && (early == 0 || !ask); ++round) {
      v1::SessionRequest d;
      d.mutable_draft()->set_round(round);
      for (int32_t t : {11, 12, 13, 14}) d.mutable_draft()->add_tokens(t);
      d.mutable_draft()->set_early_verdicts(true);  // ignored unless the session asked
      ASSERT_TRUE(s->Write(d));
      std::vector<std::vector<int32_t>> seen;
      while (true) {
        ASSERT_TRUE(s->Read(&r));
        ASSERT_TRUE(r.has_verdict());
        const v1::RoundVerdict& v = r.verdict();
        EXPECT_EQ(v.round(), round);
        if (v.final()) {
          EXPECT_EQ(v.exit_layer(), 8);
          break;
        }
        EXPECT_TRUE(ask);
        EXPECT_GE(v.exit_layer(), 1);
        EXPECT_LT(v.exit_layer(), 8);
        EXPECT_GT(v.confidence(), 0.0);
        std::vector<int32_t> tokens(v.tokens().begin(), v.tokens().end());
        for (const auto& t : seen) EXPECT_NE(t, tokens) << "the same verdict twice";
        seen.push_back(tokens);
      }
      early += static_cast<int64_t>(seen.size());
      if (!ask && round == 5) break;
    }
    if (ask) {
      EXPECT_GT(early, 0);
    }
    ctx.TryCancel();
    s->Finish();
  }
}

}  // namespace
}  // namespace splitspec

// Edge-cloud decoding with early exits and pre-drafting (edge-fsd) over real
// gRPC: the output is the target's own, and early verdicts stream as the
// protocol promises.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "client/client.h"
#include "client/predraft.h"
#include "client/predraft_switch.h"
#include "client/request_options.h"
#include "common/drafting/model_drafter.h"
#include "common/early_exit/early_exit.h"
#include "common/tokenizer/tokenizer.h"
#include "common/train/exit_trainer.h"
#include "tests/edge_cloud_util.h"
#include "tests/torch_test_util.h"

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

// The adaptive switch measures both arms in blocks, pre-drafting first, the
// first round of each block not counted; then it keeps to the faster per
// round and still tries the other a block at a time.
TEST(PredraftSwitch, MeasuresBothArmsInBlocksThenTakesTheFasterAndStillExplores) {
  PredraftSwitch sw(/*block=*/3, /*explore_every=*/4);
  auto run = [&](int rounds, double with_ms, double without_ms) {
    std::vector<bool> used;
    for (int i = 0; i < rounds; ++i) {
      const PredraftSwitch::Choice c = sw.next();
      used.push_back(c.use);
      sw.observe(c, c.use ? with_ms : without_ms, 3);
    }
    return used;
  };
  EXPECT_EQ(run(6, 6.0, 9.0), (std::vector<bool>{true, true, true, false, false, false}));
  EXPECT_EQ(sw.rounds_with(), 2) << "a block's first round is warm-up";
  EXPECT_EQ(sw.rounds_without(), 2);
  // Blocks 3..18: the faster arm, but every 4th block (4, 8, 12, 16) the other.
  std::vector<bool> used = run(48, 6.0, 9.0);
  EXPECT_EQ(std::count(used.begin(), used.end(), false), 12) << "one block in 4 tries the slower arm";
  EXPECT_FALSE(used[3]);  // block 4 explores
  EXPECT_TRUE(used[6]);
  // The regime changes: pre-drafting becomes the slower. The switch notices
  // through its exploring blocks and turns it off.
  run(600, 12.0, 9.0);
  used = run(48, 12.0, 9.0);
  EXPECT_EQ(std::count(used.begin(), used.end(), true), 12);
  // A round that committed nothing says nothing.
  const int64_t samples = sw.rounds_with() + sw.rounds_without();
  PredraftSwitch::Choice c = sw.next();
  c.sample = true;
  sw.observe(c, 100.0, 0);
  EXPECT_EQ(sw.rounds_with() + sw.rounds_without(), samples);
}

// A pre-drafted state is exactly the state drafting after the verdict would
// reach: the same tokens come out, and the main drafter continues from it.
TEST(PreDrafter, HitGivesTheDraftThatDraftingAfterTheVerdictGives) {
  c10::InferenceMode guard;
  std::shared_ptr<const Model> draft = Model::random(test::tiny_config(40, 2), 8);
  const std::vector<int32_t> prompt = {1, 7, 9, 11};
  DraftParams greedy;
  greedy.gamma = 3;
  ModelDrafter main(draft), reference(draft);
  main.begin(prompt, greedy);
  reference.begin(prompt, greedy);
  const DraftTree round1 = main.propose(8);
  reference.propose(8);
  // The verdict: first draft accepted, then a correction.
  auto verdict = [](std::vector<int32_t> tokens, int32_t accepted) {
    Verdict v;
    v.tokens = std::move(tokens);
    v.accepted = accepted;
    for (int32_t i = 0; i < accepted; ++i) v.path.push_back(i);
    return v;
  };
  const Verdict final_verdict = verdict({round1.tokens[0], 5}, 1);
  PreDrafter pre(2, QueuePolicy::kPriority, [](int64_t) { return 8; }, 1);
  pre.begin_round(1, main, round1, static_cast<int64_t>(prompt.size()));
  pre.push({1, verdict({round1.tokens[0], 6}, 1), 0.2, 3, {}});  // a wrong prediction
  pre.push({1, final_verdict, 0.9, 5, {}});
  pre.push({1, final_verdict, 0.8, 6, {}});                      // duplicate: drafted once
  // The workers are asynchronous: the final verdict waits for a running match.
  ASSERT_TRUE(test::wait_until([&] { return pre.stats().predrafts >= 2; }, std::chrono::seconds(10)));
  const VerdictExtras none;
  const std::optional<DraftTree> got = pre.take(RoundOutcome{round1, final_verdict, none}, main);
  ASSERT_TRUE(got.has_value());
  reference.accept(RoundOutcome{round1, final_verdict, none});
  const DraftTree want = reference.propose(8);
  EXPECT_EQ(got->tokens, want.tokens);
  EXPECT_EQ(main.sequence(), reference.sequence());
  EXPECT_EQ(main.stats().rounds, 1) << "the main drafter counts the round it took over";
  // Both continue identically from here.
  const Verdict round2 = verdict({want.tokens[0], want.tokens[1], 3}, 2);
  main.accept(RoundOutcome{*got, round2, none});
  reference.accept(RoundOutcome{want, round2, none});
  const DraftTree round3 = main.propose(8);
  EXPECT_EQ(round3.tokens, reference.propose(8).tokens);
  EXPECT_EQ(pre.stats().predraft_hits, 1);
  EXPECT_EQ(pre.stats().exit_layer_sum, 5);

  // A verdict nobody predicted is a miss and leaves main untouched.
  pre.begin_round(3, main, round3, static_cast<int64_t>(main.sequence().size()));
  const auto before = main.sequence();
  EXPECT_FALSE(pre.take(RoundOutcome{round3, verdict({4}, 0), none}, main).has_value());
  EXPECT_EQ(main.sequence(), before);
  EXPECT_EQ(pre.stats().predraft_lookups, 2);
}

}  // namespace
}  // namespace splitspec

// Batched verification: rounds of many sessions in one target forward give
// each session bitwise what it gets alone, at every weight type and thread
// count, in the engine, the decoder and the compute worker (over real gRPC:
// batched_server_test.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include <atomic>
#include <limits>
#include <mutex>
#include <thread>

#include "common/backend/cpu_backend.h"
#include "common/decoding/target_decoder.h"
#include "common/decoding/token_tree.h"
#include "common/kernels/threads.h"
#include "common/model/model.h"
#include "common/util/error.h"
#include "common/weights/safetensors.h"
#include "server/compute_queue.h"
#include "server/server.h"
#include "tests/test_util.h"

namespace splitspec {
namespace {

// Restores the thread count a test changed.
struct Threads {
  int before = compute_threads();
  explicit Threads(int n) { set_compute_threads(n); }
  ~Threads() { set_compute_threads(before); }
};

// A draft tree of `n` nodes over `vocab`: a chain when `chain`, else a
// branching one; the same for the same seed.
DraftTree some_tree(int32_t n, int64_t vocab, bool chain, uint64_t seed) {
  DraftTree t;
  for (int32_t i = 0; i < n; ++i) {
    t.tokens.push_back(static_cast<int32_t>((seed * 7919 + i * 31) % vocab));
    t.parents.push_back(chain ? i - 1 : (i < 2 ? -1 : static_cast<int32_t>((i * 13 + seed) % i)));
  }
  return t;
}

std::vector<int32_t> some_prompt(int32_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((seed * 104729 + i * 17 + 1) % vocab));
  return p;
}

bool same(const Rows& a, const Rows& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.size()) * sizeof(float)) == 0;
}

// Layer l's live keys (or values) of two caches of one type, bitwise.
bool same_entries(const ModelConfig& c, const KVCache& cache, int64_t layer, const void* a, const void* b,
                  int64_t size) {
  const size_t elem = cache.type() == KVType::F16 ? 2 : 4;
  const size_t stride = static_cast<size_t>(cache.head_stride(layer)) * elem;
  for (int64_t h = 0; h < c.num_key_value_heads; ++h)
    if (std::memcmp(static_cast<const char*>(a) + h * stride, static_cast<const char*>(b) + h * stride,
                    static_cast<size_t>(size * c.head_dim) * elem) != 0)
      return false;
  return true;
}

class BatchedForward : public ::testing::TestWithParam<std::tuple<WType, int, bool, KVType>> {};

// Eight sequences at different lengths, chains and trees (with masks and
// positions), through one forward_batch: each one's logits, hidden states
// and cache are bitwise those of its forward alone. On a tiny random model
// stored at the type, and on the demo target (large enough for every
// kernel to split its work over threads) converted to it at load; with
// either KV cache type.
TEST_P(BatchedForward, EachSequenceIsBitwiseItsForwardAlone) {
  const auto [type, threads, demo, kv] = GetParam();
  Threads t(threads);
  test::TempDir dir;
  std::shared_ptr<Model> m;
  if (demo) {
    m = Model::load(test::demo_target_dir(), type);
  } else {
    Model::random(test::tiny_config(96, 2), 21)->save(dir.str(), type);
    m = Model::load(dir.str());
  }
  ASSERT_EQ(m->weight_type(), type);
  m->set_kv_type(kv);
  const int64_t vocab = m->config().vocab_size;
  constexpr int kSeqs = 8;
  std::vector<KVCache> alone, batched;
  for (int s = 0; s < kSeqs; ++s) {
    // A prefix of its own length in both caches.
    ForwardRequest pre;
    pre.tokens = some_prompt(3 + 2 * s, vocab, s);
    alone.push_back(m->new_cache(64));
    batched.push_back(m->new_cache(64));
    m->forward(pre, alone.back());
    m->forward(pre, batched.back());
  }
  std::vector<ForwardRequest> reqs(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    ForwardRequest& r = reqs[s];
    const bool chain = s % 2 == 0;
    const DraftTree tree = some_tree(1 + s, vocab, chain, s);
    r.tokens = {static_cast<int32_t>(s + 1)};
    r.tokens.insert(r.tokens.end(), tree.tokens.begin(), tree.tokens.end());
    r.hidden_layers = {0};
    r.final_hidden = s % 3 == 0;
    if (s % 4 == 1) r.logits_rows = std::vector<int64_t>{0, static_cast<int64_t>(r.tokens.size()) - 1};
    if (!chain) {
      const int64_t past = alone[s].size();
      std::vector<int32_t> parents{-1};
      for (int32_t p : tree.parents) parents.push_back(p + 1);
      r.positions.push_back(past);
      for (int32_t d : tree.depths()) r.positions.push_back(past + d);
      r.mask = tree_attention_mask(parents, past);
    }
  }
  std::vector<ForwardResult> want;
  for (int s = 0; s < kSeqs; ++s) want.push_back(m->forward(reqs[s], alone[s]));
  std::vector<Model::BatchItem> items;
  for (int s = 0; s < kSeqs; ++s) items.push_back({&reqs[s], &batched[s]});
  const std::vector<ForwardResult> got = m->forward_batch(items);
  ASSERT_EQ(got.size(), static_cast<size_t>(kSeqs));
  for (int s = 0; s < kSeqs; ++s) {
    EXPECT_TRUE(same(got[s].logits, want[s].logits)) << "sequence " << s;
    EXPECT_TRUE(same(got[s].hidden.at(0), want[s].hidden.at(0))) << "sequence " << s;
    if (reqs[s].final_hidden) {
      EXPECT_TRUE(same(got[s].final_hidden, want[s].final_hidden)) << "sequence " << s;
    }
    ASSERT_EQ(batched[s].size(), alone[s].size());
    for (int64_t l = 0; l < m->config().num_hidden_layers; ++l) {
      const int64_t size = alone[s].size();
      EXPECT_TRUE(same_entries(m->config(), alone[s], l, batched[s].keys(l), alone[s].keys(l), size))
          << "sequence " << s << " layer " << l;
      EXPECT_TRUE(same_entries(m->config(), alone[s], l, batched[s].values(l), alone[s].values(l), size))
          << "sequence " << s << " layer " << l;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryTypeAndThreads, BatchedForward,
                         ::testing::Combine(::testing::Values(WType::F32, WType::F16, WType::BF16, WType::Q8_0,
                                                              WType::Q4_0),
                                            ::testing::Values(1, 2), ::testing::Bool(),
                                            ::testing::Values(KVType::F32, KVType::F16)),
                         [](const auto& info) {
                           return std::string(std::get<2>(info.param) ? "demo_" : "tiny_") +
                                  wtype_name(std::get<0>(info.param)) + "_threads" +
                                  std::to_string(std::get<1>(info.param)) + "_kv" + kv_type_name(std::get<3>(info.param));
                         });

TEST(BatchedForwardBadInput, AnInvalidSequenceLeavesEveryCacheUnchanged) {
  auto m = Model::random(test::tiny_config(50, 2), 3);
  KVCache a = m->new_cache(16), b = m->new_cache(16);
  ForwardRequest good, bad;
  good.tokens = {1, 2, 3};
  bad.tokens = {4, 50};  // out of the vocabulary
  EXPECT_THROW(m->forward_batch({{&good, &a}, {&bad, &b}}), Error);
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(b.size(), 0);
  // One cache for two sequences would interleave them.
  EXPECT_THROW(m->forward_batch({{&good, &a}, {&good, &a}}), Error);
  EXPECT_THROW(m->forward_batch({}), Error);
  EXPECT_EQ(a.size(), 0);
}

// Whole generations, round by round: greedy and sampled sessions verified
// together commit exactly what each commits verified alone.
TEST(BatchedRounds, GenerationsVerifiedTogetherCommitWhatTheyCommitAlone) {
  auto m = Model::random(test::tiny_config(64, 2), 5);
  const CpuBackend cpu(*m);
  constexpr int kGens = 6;
  std::vector<std::unique_ptr<TargetDecoder>> alone, together;
  for (int g = 0; g < kGens; ++g) {
    GenerateOptions o;
    o.max_new_tokens = 30;
    o.ignore_eos = true;
    if (g % 2) {
      o.sampling.temperature = 0.9f;
      o.sampling.seed = 100 + g;
    }
    alone.push_back(std::make_unique<TargetDecoder>(cpu, some_prompt(2 + g, 64, g), o));
    together.push_back(std::make_unique<TargetDecoder>(cpu, some_prompt(2 + g, 64, g), o));
  }
  for (int round = 0; round < 40; ++round) {
    std::vector<DraftTree> trees;
    std::vector<TargetDecoder::RoundRequest> requests(kGens);
    std::vector<TargetDecoder::BatchRound> batch;
    std::vector<int> who;
    for (int g = 0; g < kGens; ++g) {
      DraftTree t = some_tree((round + g) % 5, 64, g % 3 != 0, round * 10 + g);
      // Sampled rounds carry a q: one-hot at each node (chosen nodes).
      trees.push_back(t);
    }
    for (int g = 0; g < kGens; ++g) {
      if (together[g]->finished()) continue;
      trees[g].truncate(together[g]->room());
      batch.push_back({together[g].get(), &trees[g], &requests[g]});
      who.push_back(g);
    }
    if (batch.empty()) break;
    const std::vector<RoundResult> got = TargetDecoder::verify_batch(batch);
    for (size_t i = 0; i < who.size(); ++i) {
      const int g = who[i];
      const RoundResult want = alone[g]->verify(trees[g]);
      EXPECT_EQ(got[i].verdict.tokens, want.verdict.tokens) << "generation " << g << " round " << round;
      EXPECT_EQ(got[i].verdict.path, want.verdict.path);
      EXPECT_EQ(got[i].finish, want.finish);
    }
  }
  for (int g = 0; g < kGens; ++g) {
    EXPECT_TRUE(together[g]->finished());
    EXPECT_EQ(together[g]->sequence(), alone[g]->sequence()) << "generation " << g;
  }
}

// A long prompt prefilled in chunks, some alongside other generations'
// rounds, then verified: the same round results as one prefill.
TEST(BatchedRounds, APrefillInChunksIsBitwiseOnePrefill) {
  auto m = Model::random(test::tiny_config(64, 2), 9);
  const CpuBackend cpu(*m);
  for (const float temperature : {0.0f, 0.8f}) {
    GenerateOptions o;
    o.max_new_tokens = 12;
    o.ignore_eos = true;
    o.sampling.temperature = temperature;
    o.sampling.seed = 3;
    const std::vector<int32_t> prompt = some_prompt(37, 64, 4);
    TargetDecoder whole(cpu, prompt, o), chunked(cpu, prompt, o), other(cpu, some_prompt(3, 64, 5), o);
    EXPECT_EQ(chunked.prefill_left(), 36);
    const DraftTree none;
    TargetDecoder::RoundRequest plain;
    TargetDecoder::verify_batch({}, {{&chunked, 10}});
    TargetDecoder::verify_batch({{&other, &none, &plain}}, {{&chunked, 20}});
    EXPECT_EQ(chunked.prefill_left(), 6);
    EXPECT_THROW(TargetDecoder::verify_batch({}, {{&chunked, 7}}), Error);
    TargetDecoder::verify_batch({}, {{&chunked, 6}});
    EXPECT_EQ(chunked.prefill_left(), 0);
    while (!whole.finished()) {
      const DraftTree tree = some_tree(3, 64, true, whole.sequence().size());
      const RoundResult a = whole.verify(tree), b = chunked.verify(tree);
      EXPECT_EQ(a.verdict.tokens, b.verdict.tokens);
    }
    EXPECT_EQ(whole.sequence(), chunked.sequence()) << "temperature " << temperature;
  }
}

// The compute worker batches the rounds waiting together, within its row
// budget and in order; with batching off it runs them one at a time.
TEST(ComputeQueueBatching, RoundsWaitingTogetherShareAForwardWithinTheRowBudget) {
  auto m = Model::random(test::tiny_config(50, 2), 7);
  const CpuBackend cpu(*m);
  for (const bool enabled : {true, false}) {
    BatchingOptions b;
    b.enabled = enabled;
    b.max_rows = 12;
    std::vector<std::unique_ptr<TargetDecoder>> decoders;
    GenerateOptions o;
    o.max_new_tokens = 8;
    std::mutex mu;
    std::vector<std::pair<int, RoundVerified>> outcomes;
    {
      // Before q: q's end runs the blocker, which reads it.
      std::atomic<bool> release{false};
      ComputeQueue q(1, b);
      // Holds the worker so that every round is queued before any runs.
      q.post([&] {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
      for (int i = 0; i < 6; ++i) {
        decoders.push_back(std::make_unique<TargetDecoder>(cpu, std::vector<int32_t>{1, 2}, o));
        RoundJob job;
        job.decoder = decoders.back().get();
        job.tree = std::make_shared<const DraftTree>(some_tree(3, 50, true, i));  // 2 prompt rows + 3: 5 a round
        job.done = [&, i](RoundVerified out) {
          std::lock_guard<std::mutex> lock(mu);
          outcomes.emplace_back(i, std::move(out));
        };
        q.post_round(std::move(job));
      }
      EXPECT_EQ(q.waiting_rounds(), 6);
      release = true;
    }
    ASSERT_EQ(outcomes.size(), 6u);
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(outcomes[i].first, i) << "rounds run in the order posted";
      ASSERT_TRUE(outcomes[i].second.result.has_value()) << outcomes[i].second.error;
      EXPECT_EQ(outcomes[i].second.batch_rounds, enabled ? 2 : 1) << "round " << i;
      EXPECT_EQ(outcomes[i].second.batch_rows, enabled ? 10 : 5);
    }
  }
}

// A round that fails its checks gets its own error; the others of its batch
// are verified, and one its stream no longer wants is skipped.
TEST(ComputeQueueBatching, ABadRoundFailsAloneAndAnUnwantedOneIsSkipped) {
  auto m = Model::random(test::tiny_config(50, 2), 8);
  const CpuBackend cpu(*m);
  GenerateOptions o;
  o.max_new_tokens = 8;
  TargetDecoder good(cpu, {1, 2}, o), bad(cpu, {3, 4}, o), gone(cpu, {5, 6}, o);
  std::vector<RoundVerified> out(3);
  {
    // Before q: q's end runs the blocker, which reads it.
    std::atomic<bool> release{false};
    ComputeQueue q(1);
    q.post([&] {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    RoundJob a;
    a.decoder = &good;
    a.tree = std::make_shared<const DraftTree>(some_tree(2, 50, true, 1));
    a.done = [&](RoundVerified r) { out[0] = std::move(r); };
    RoundJob b;
    b.decoder = &bad;
    DraftTree outside = some_tree(2, 50, true, 2);
    outside.tokens[1] = 77;  // outside the vocabulary
    b.tree = std::make_shared<const DraftTree>(outside);
    b.done = [&](RoundVerified r) { out[1] = std::move(r); };
    RoundJob c;
    c.decoder = &gone;
    c.tree = std::make_shared<const DraftTree>(some_tree(2, 50, true, 3));
    c.wanted = [] { return false; };
    c.done = [&](RoundVerified r) { out[2] = std::move(r); };
    q.post_round(std::move(a));
    q.post_round(std::move(b));
    q.post_round(std::move(c));
    release = true;
  }
  EXPECT_TRUE(out[0].result.has_value()) << out[0].error;
  EXPECT_FALSE(out[1].result.has_value());
  EXPECT_TRUE(out[1].invalid);
  EXPECT_NE(out[1].error.find("77"), std::string::npos) << out[1].error;
  EXPECT_TRUE(out[2].skipped);
  EXPECT_EQ(bad.generated(), 0);
  EXPECT_EQ(gone.generated(), 0);
}

// A target whose embedding of token `poisoned` turns NaN on disk after it
// was loaded (its F32 weights are mapped, not copied): a sampled round over
// that token fails after the forward ("sampling from an empty
// distribution"), while rounds of other sequences in the same forward are
// fine (rows never mix). Loading checks the weights, so only a file changed
// under a running model gets there.
std::shared_ptr<Model> target_with_a_poisoned_token(const test::TempDir& dir, int32_t poisoned) {
  Model::random(test::tiny_config(50, 2), 12)->save(dir.str("model"));
  std::shared_ptr<Model> m = Model::load(dir.str("model"));
  const std::string file = dir.str("model") + "/model.safetensors";
  const TensorInfo embed = SafetensorsFile(file).tensors().at("model.embed_tokens.weight");
  const int64_t hidden = embed.shape[1];
  const std::vector<float> nan(static_cast<size_t>(hidden), std::numeric_limits<float>::quiet_NaN());
  std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
  out.seekp(static_cast<std::streamoff>(embed.file_offset + poisoned * hidden * sizeof(float)));
  out.write(reinterpret_cast<const char*>(nan.data()), static_cast<std::streamsize>(hidden * sizeof(float)));
  return m;
}

// One round of a batch that fails after the shared forward leaves every
// decoder of the batch as it was (none commits its round), so retrying
// them one by one commits each once.
TEST(BatchedVerification, ARoundThatFailsAfterTheForwardLeavesTheBatchUncommitted) {
  test::TempDir dir;
  auto m = target_with_a_poisoned_token(dir, 7);
  const CpuBackend cpu(*m);
  GenerateOptions o;
  o.max_new_tokens = 8;
  o.sampling.temperature = 1.0f;
  o.sampling.seed = 3;
  TargetDecoder fine(cpu, {1, 2, 3}, o), poisoned(cpu, {1, 7}, o), reference(cpu, {1, 2, 3}, o);
  const DraftTree none;
  const TargetDecoder::RoundRequest plain;
  EXPECT_THROW(TargetDecoder::verify_batch({{&fine, &none, &plain}, {&poisoned, &none, &plain}}), Error);
  EXPECT_EQ(fine.sequence(), reference.sequence());
  EXPECT_EQ(fine.forwards(), 0);
  // Its cache is back where it was: its next round is the reference's.
  const RoundResult again = fine.verify(none), expected = reference.verify(none);
  EXPECT_EQ(again.verdict.tokens, expected.verdict.tokens);
  EXPECT_EQ(fine.sequence(), reference.sequence());
}

// The compute worker retries such a batch round by round: the good round is
// committed once (it used to be committed by the batch and again alone),
// the failing one gets its error.
TEST(ComputeQueueBatching, ARoundFailingAfterTheForwardDoesNotCommitItsBatchTwice) {
  test::TempDir dir;
  auto m = target_with_a_poisoned_token(dir, 7);
  const CpuBackend cpu(*m);
  GenerateOptions o;
  o.max_new_tokens = 8;
  o.sampling.temperature = 1.0f;
  TargetDecoder fine(cpu, {1, 2, 3}, o), poisoned(cpu, {1, 7}, o);
  std::vector<RoundVerified> out(2);
  {
    std::atomic<bool> release{false};
    ComputeQueue q(1);
    q.post([&] {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    for (int i = 0; i < 2; ++i) {
      RoundJob j;
      j.decoder = i == 0 ? &fine : &poisoned;
      j.tree = std::make_shared<const DraftTree>();
      j.done = [&out, i](RoundVerified r) { out[i] = std::move(r); };
      q.post_round(std::move(j));
    }
    release = true;
  }
  ASSERT_TRUE(out[0].result.has_value()) << out[0].error;
  EXPECT_EQ(out[0].result->verdict.tokens.size(), 1u);
  EXPECT_EQ(fine.generated(), 1);
  EXPECT_EQ(fine.forwards(), 1);
  EXPECT_FALSE(out[1].result.has_value());
  EXPECT_NE(out[1].error.find("empty distribution"), std::string::npos) << out[1].error;
  EXPECT_EQ(poisoned.generated(), 0);
}

// A round with a prompt longer than the row budget is prefilled in chunks,
// and rounds posted after it are verified before it ends: one long prompt
// does not hold the others for its whole prefill. Its verdict is unchanged.
TEST(ComputeQueueBatching, ALongPrefillRunsInChunksBetweenOtherRounds) {
  auto m = Model::random(test::tiny_config(50, 2), 10);
  const CpuBackend cpu(*m);
  GenerateOptions o;
  o.max_new_tokens = 4;
  const std::vector<int32_t> long_prompt = some_prompt(40, 50, 1);
  TargetDecoder alone(cpu, long_prompt, o);
  const DraftTree tree = some_tree(2, 50, true, 1);
  const RoundResult want = alone.verify(tree);
  TargetDecoder long_one(cpu, long_prompt, o);
  std::vector<std::unique_ptr<TargetDecoder>> short_ones;
  std::mutex mu;
  std::vector<std::string> order;
  std::optional<RoundResult> got;
  BatchingOptions b;
  b.max_rows = 8;
  // Outlives the block: the blocker may read it after the block ends (found by ASan).
  std::atomic<bool> release{false};
  ComputeQueue q(1, b);
  {
    q.post([&] {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    RoundJob j;
    j.decoder = &long_one;
    j.tree = std::make_shared<const DraftTree>(tree);
    j.done = [&](RoundVerified out) {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back("long");
      got = out.result;
    };
    q.post_round(std::move(j));
    for (int i = 0; i < 3; ++i) {
      short_ones.push_back(std::make_unique<TargetDecoder>(cpu, std::vector<int32_t>{1, 2}, o));
      RoundJob s;
      s.decoder = short_ones.back().get();
      s.tree = std::make_shared<const DraftTree>(some_tree(2, 50, true, i));
      s.done = [&, i](RoundVerified) {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back("short" + std::to_string(i));
      };
      q.post_round(std::move(s));
    }
    release = true;
  }
  ASSERT_TRUE(test::wait_until(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return order.size() == 4;
      },
      std::chrono::seconds(10)));
  EXPECT_NE(order.back(), "short2") << "the long prompt's round finished first";
  EXPECT_EQ(order.front(), "short0");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->verdict.tokens, want.verdict.tokens);
  EXPECT_EQ(long_one.sequence(), alone.sequence());
  EXPECT_GE(q.stats().prefill_chunks.load(), 4);
}

TEST(BatchedServerConfig, BadSettingsAreRefusedByName) {
  auto refused = [](const std::function<void(ServerConfig&)>& set, const std::string& what) {
    ServerConfig c;
    set(c);
    EXPECT_NE(test::error_of([&] { c.validate(); }).find(what), std::string::npos) << what;
  };
  refused([](ServerConfig& c) { c.max_batch_rows = 0; }, "max_batch_rows");
  refused([](ServerConfig& c) { c.batch_wait_ms = -1; }, "batch_wait_ms");
  refused([](ServerConfig& c) { c.draft_hint = "sometimes"; }, "draft_hint");
  refused([](ServerConfig& c) { c.tls_cert = "cert.pem"; }, "tls_key");
  refused([](ServerConfig& c) { c.tls_client_ca = "ca.pem"; }, "needs tls_cert");
  refused([](ServerConfig& c) { c.health_listen = "9000"; }, "health_listen");
  refused([](ServerConfig& c) { c.kv_cache = "q8_0"; }, "kv_cache must be f32 or f16");
}

}  // namespace
}  // namespace splitspec

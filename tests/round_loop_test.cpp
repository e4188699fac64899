// The round loop with a drafter it has never seen: a scripted test drafter,
// registered with one line as any new technique is, runs through both
// verifiers (local, and the server over real gRPC) and pre-drafting with no
// change to the loop, the verifiers or the client. It also asks for the
// verdict extras, which both verifiers must fill identically.
#include "client/round_loop.h"

#include <gtest/gtest.h>

#include <mutex>

#include "common/backend/cpu_backend.h"
#include "client/client.h"
#include "client/local_verifier.h"
#include "client/request_options.h"
#include "common/drafting/registry.h"
#include "common/kernels/kernels.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/error.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

// What every scripted drafter saw, for the test to inspect.
struct Seen {
  std::mutex mu;
  std::vector<std::vector<TopK>> top_k;  // per accepted round
  std::vector<std::vector<float>> hidden;
  int64_t forks = 0;
};
Seen& seen() {
  static Seen s;
  return s;
}

// Set to make every scripted drafter's work between rounds fail.
bool& worker_fails() {
  static bool f = false;
  return f;
}

// Proposes, each round, the next tokens of a script (the target's own greedy
// continuation, so that rounds accept several tokens) as a chain, with a
// wrong sibling under the root and one under the chain's first node: a tree
// of chosen nodes (no q), verified as one-hot under sampling.
class ScriptedDrafter final : public Drafter {
 public:
  explicit ScriptedDrafter(std::vector<int32_t> script) : script_(std::move(script)) {}
  std::string name() const override { return "scripted"; }
  ExtrasRequest wants() const override { return {3, true}; }
  bool can_fork() const override { return true; }
  std::unique_ptr<Drafter> fork() const override {
    auto copy = std::make_unique<ScriptedDrafter>(script_);
    copy->assign_state(*this);
    std::lock_guard<std::mutex> lock(seen().mu);
    seen().forks += 1;
    return copy;
  }
  size_t memory_bytes() const override { return script_.size() * sizeof(int32_t); }
  void verified() override {
    if (worker_fails()) throw Error("the scripted drafter's worker failed");
  }

 private:
  void on_begin(const std::vector<int32_t>& prompt) override {
    prompt_len_ = static_cast<int64_t>(prompt.size());
    generated_ = 0;
  }
  DraftTree on_propose(int32_t budget, const std::function<bool()>&) override {
    DraftTree t;
    auto add = [&](int32_t token, int32_t parent) {
      if (t.size() < budget) {
        t.tokens.push_back(token);
        t.parents.push_back(parent);
      }
    };
    auto script_at = [&](int64_t i) { return i < static_cast<int64_t>(script_.size()) ? script_[i] : 0; };
    add(script_at(generated_), -1);
    add((script_at(generated_) + 1) % 8000, -1);  // a wrong sibling
    add(script_at(generated_ + 1), 0);
    add((script_at(generated_ + 1) + 7) % 8000, 0);
    for (int32_t i = 2; i < 4; ++i) add(script_at(generated_ + i), t.size() - 2);
    return t;
  }
  void on_accept(const RoundOutcome& o) override {
    generated_ += static_cast<int64_t>(o.verdict.tokens.size());
    if (o.extras.top_k.empty()) return;  // a predicted verdict carries none
    std::lock_guard<std::mutex> lock(seen().mu);
    seen().top_k.push_back(o.extras.top_k);
    seen().hidden.push_back(o.extras.hidden);
  }
  void on_assign(const Drafter& other) override {
    const auto& o = static_cast<const ScriptedDrafter&>(other);
    prompt_len_ = o.prompt_len_;
    generated_ = o.generated_;
  }
  void on_swap(Drafter& other) override {
    auto& o = static_cast<ScriptedDrafter&>(other);
    std::swap(prompt_len_, o.prompt_len_);
    std::swap(generated_, o.generated_);
  }

  std::vector<int32_t> script_;
  int64_t prompt_len_ = 0;
  int64_t generated_ = 0;
};

// The script every scripted drafter follows; set before each use.
std::vector<int32_t>& script() {
  static std::vector<int32_t> s;
  return s;
}

// The one registration line a new drafter needs.
const bool registered = (register_drafter({"scripted", "test drafter", false,
                                           [](const DrafterSpec&) { return std::make_unique<ScriptedDrafter>(script()); }}),
                         true);

ClientOptions scripted(VerifierKind where, const std::string& server = "") {
  ClientOptions o;
  o.verifier = where;
  o.drafter = "scripted";
  o.server = server;
  o.target_dir = test::demo_target_dir();
  return o;
}

TEST(RoundLoop, ARegisteredDrafterRunsThroughBothVerifiersUnchanged) {
  ASSERT_TRUE(registered);
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  auto target = Model::load(test::demo_target_dir());
  Tokenizer tok(test::demo_target_dir());
  auto local = Client::connect(scripted(VerifierKind::kLocal));
  auto remote = Client::connect(scripted(VerifierKind::kServer, srv.address));
  ClientOptions with_predraft = scripted(VerifierKind::kServer, srv.address);
  with_predraft.predraft = true;
  auto pre = Client::connect(with_predraft);
  EXPECT_EQ(mode_name(with_predraft), "server+scripted+predraft");
  for (const char* text : {"The ship sailed", "It was a dark and stormy night"}) {
    const std::vector<int32_t> prompt = test::encode_prompt(tok, text);
    Request req;
    req.max_new_tokens = 24;
    req.ignore_eos = true;
    const test::Reference want = test::target_alone(*target, prompt, to_generate_options(req));
    script() = want.output_ids;
    {
      std::lock_guard<std::mutex> lock(seen().mu);
      seen().top_k.clear();
      seen().hidden.clear();
    }
    const Result a = local->generate_ids(prompt, req);
    ASSERT_EQ(a.ids, want.output_ids) << "local, " << text;
    EXPECT_GT(a.stats.accepted_per_round, 1.5) << "the script is right: rounds accept several tokens";
    EXPECT_EQ(a.stats.branched_trees, a.stats.rounds) << "every round is a tree";
    std::vector<std::vector<TopK>> local_top_k;
    std::vector<std::vector<float>> local_hidden;
    {
      std::lock_guard<std::mutex> lock(seen().mu);
      local_top_k = std::exchange(seen().top_k, {});
      local_hidden = std::exchange(seen().hidden, {});
    }
    const Result b = remote->generate_ids(prompt, req);
    ASSERT_EQ(b.ids, want.output_ids) << "server, " << text;
    EXPECT_EQ(b.stats.rounds, a.stats.rounds);
    std::vector<std::vector<TopK>> remote_top_k;
    std::vector<std::vector<float>> remote_hidden;
    {
      std::lock_guard<std::mutex> lock(seen().mu);
      remote_top_k = std::exchange(seen().top_k, {});
      remote_hidden = std::exchange(seen().hidden, {});
    }
    // The extras, filled by either verifier, bitwise alike (batch-invariant
    // kernels, the same decoder behind both).
    ASSERT_EQ(local_top_k.size(), static_cast<size_t>(a.stats.rounds));
    ASSERT_EQ(remote_top_k.size(), local_top_k.size());
    for (size_t r = 0; r < local_top_k.size(); ++r) {
      ASSERT_FALSE(local_top_k[r].empty());
      ASSERT_EQ(remote_top_k[r].size(), local_top_k[r].size());
      for (size_t i = 0; i < local_top_k[r].size(); ++i) {
        EXPECT_EQ(local_top_k[r][i].ids.size(), 3u);
        EXPECT_EQ(remote_top_k[r][i].ids, local_top_k[r][i].ids);
        EXPECT_EQ(remote_top_k[r][i].probs, local_top_k[r][i].probs);
      }
      // The server sends the hidden state in half precision: the local one, rounded.
      const int64_t H = target->config().hidden_size;
      ASSERT_EQ(local_hidden[r].size(), static_cast<size_t>(H));
      std::vector<uint16_t> half(local_hidden[r].size());
      std::vector<float> rounded(half.size());
      kernels::float_to_half(local_hidden[r].data(), H, half.data());
      kernels::half_to_float(half.data(), H, rounded.data());
      EXPECT_EQ(remote_hidden[r], rounded);
    }
    // Greedy: every appended token is the target's top-1 where it was made.
    size_t at = 0;
    for (const auto& round : local_top_k)
      for (const TopK& k : round) EXPECT_EQ(k.ids[0], want.output_ids[at++]);
    EXPECT_EQ(pre->generate_ids(prompt, req).ids, want.output_ids) << "pre-drafting, " << text;
  }
  EXPECT_GT(seen().forks, 0) << "pre-drafting forked the scripted drafter";
}

// A drafter's error at the end of its work between rounds ends the
// generation with that error, and the client stays usable; it used to be
// thrown from a destructor (implicitly noexcept) and terminate the process.
TEST(RoundLoop, ADrafterWorkersErrorIsRaisedNotFatal) {
  auto client = Client::connect(scripted(VerifierKind::kLocal));
  Tokenizer tok(test::demo_target_dir());
  const std::vector<int32_t> prompt = test::encode_prompt(tok, "The ship sailed");
  Request req;
  req.max_new_tokens = 8;
  script() = std::vector<int32_t>(16, 5);
  worker_fails() = true;
  const std::string error = test::error_of([&] { client->generate_ids(prompt, req); });
  worker_fails() = false;
  EXPECT_NE(error.find("the scripted drafter's worker failed"), std::string::npos) << error;
  EXPECT_EQ(client->generate_ids(prompt, req).ids.size(), 8u);
}

// Sampled: a tree of chosen nodes is verified as one-hot, and the same seed
// gives the same tokens whichever verifier runs it (the same draws, in the
// same order, on the same logits).
TEST(RoundLoop, SampledScriptedTreesMatchAcrossVerifiers) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  auto local = Client::connect(scripted(VerifierKind::kLocal));
  auto remote = Client::connect(scripted(VerifierKind::kServer, srv.address));
  Request req;
  req.max_new_tokens = 20;
  req.ignore_eos = true;
  req.temperature = 0.8f;
  req.top_k = 40;
  auto target = Model::load(test::demo_target_dir());
  const std::vector<int32_t> prompt = {1, 345, 1046};
  script() = test::target_alone(*target, prompt, GenerateOptions{20, {}, true}).output_ids;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    req.seed = seed;
    const Result a = local->generate_ids(prompt, req);
    const Result b = remote->generate_ids(prompt, req);
    EXPECT_EQ(a.ids, b.ids) << "seed " << seed;
    req.seed = seed;
    const Result c = local->generate_ids(prompt, req);
    EXPECT_EQ(a.ids, c.ids) << "a seed reproduces a run";
  }
}

// A drafter that proposes over its budget is stopped before the verifier
// sees the tree.
class GreedyDrafter final : public Drafter {
 public:
  std::string name() const override { return "over-budget"; }
  size_t memory_bytes() const override { return 0; }

 private:
  void on_begin(const std::vector<int32_t>&) override {}
  DraftTree on_propose(int32_t budget, const std::function<bool()>&) override {
    return DraftTree::chain(std::vector<int32_t>(budget + 1, 3));
  }
  void on_accept(const RoundOutcome&) override {}
};

TEST(RoundLoop, ClearErrorsForWhatCannotWork) {
  std::shared_ptr<const Model> target = Model::random(test::tiny_config(50, 2), 3);
  GreedyDrafter over;
  GenerateOptions o;
  o.max_new_tokens = 4;
  EXPECT_NE(test::error_of([&] { test::decode_locally(target, over, {1, 2}, o); }).find("over a budget of"),
            std::string::npos);
  // Pre-drafting needs early verdicts, which a local target does not stream.
  LocalVerifier verifier(std::make_shared<CpuBackend>(target));
  const std::unique_ptr<Drafter> none = find_drafter("none").make({});
  RoundLoopOptions lo;
  lo.generate = o;
  lo.predraft = true;
  EXPECT_NE(test::error_of([&] { run_round_loop(*none, verifier, {1, 2}, lo); }).find("pre-drafting needs early verdicts"),
            std::string::npos);
  // A deadline already passed.
  lo.predraft = false;
  lo.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  EXPECT_NE(test::error_of([&] { run_round_loop(*none, verifier, {1, 2}, lo); }).find("DEADLINE_EXCEEDED"),
            std::string::npos);
  // Nothing to generate: no round at all.
  lo.deadline = std::chrono::steady_clock::time_point::max();
  lo.generate.max_new_tokens = 0;
  const RoundLoopResult empty = run_round_loop(*none, verifier, {1, 2}, lo);
  EXPECT_TRUE(empty.ids.empty());
  EXPECT_EQ(empty.finish, FinishReason::kLength);
  EXPECT_EQ(empty.stats.rounds, 0);
  // Unknown drafters and duplicate registrations.
  EXPECT_NE(test::error_of([] { find_drafter("oracle"); }).find("unknown drafter 'oracle' (none, model, model-tree"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { register_drafter({"model", "again", false, find_drafter("model").make}); })
                .find("exists already"),
            std::string::npos);
}

}  // namespace
}  // namespace splitspec

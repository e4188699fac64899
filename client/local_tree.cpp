#include "client/local_tree.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "common/util/error.h"
#include "common/drafting/fallback_threshold.h"
#include "common/util/stopwatch.h"
#include "common/decoding/target_decoder.h"
#include "common/engine/threads.h"
#include "common/drafting/tree_drafter.h"

namespace splitspec {

namespace {

void validate(const TreeOptions& o) {
  if (o.tree_nodes < 1) throw Error("tree-nodes must be at least 1");
  if (o.max_tree_nodes < 1) throw Error("max-tree-nodes must be at least 1");
  if (o.max_provisional < 0) throw Error("max-provisional must be >= 0");
  if (o.max_children < 1) throw Error("max-children must be at least 1");
  if (o.draft_width < 1) throw Error("draft-width must be at least 1");
  FallbackThreshold check(o.initial_alpha);  // throws on an alpha outside (0, 1]
}

// Provisional generation (§III-D) on its own thread. It drafts only while
// the verification forward waits for weights, and at the lowest CPU priority
// (SCHED_IDLE), so that the forward's compute and the weight loader always
// win a contended core: the paper's rule that provisional work must not slow
// the verification down.
class ProvisionalWorker {
 public:
  ProvisionalWorker(TreeDrafter& drafter, const SamplingParams& params, Rng& rng, const StreamedWeights& stream,
                    int32_t max_tokens, int threads)
      : drafter_(drafter), params_(params), rng_(rng), stream_(stream), max_tokens_(max_tokens), threads_(threads) {
    thread_ = std::thread([this] { loop(); });
  }
  ~ProvisionalWorker() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Drafts on the frozen tree until stop().
  void start() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      active_ = true;
      drafted_ = 0;
    }
    cv_.notify_all();
  }
  // Returns once no step is running; the drafter is the caller's again.
  int64_t stop() {
    std::unique_lock<std::mutex> lk(mu_);
    active_ = false;
    cv_.wait(lk, [&] { return !in_step_; });
    if (error_) std::rethrow_exception(error_);
    return drafted_;
  }

 private:
  void loop() {
    sched_param lowest{};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &lowest);  // best effort
    set_compute_threads(threads_);
    c10::InferenceMode guard;
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      cv_.wait(lk, [&] { return quit_ || active_; });
      if (quit_) return;
      bool drafted = false;
      if (stream_.forward_waiting() && drafter_.provisional() < max_tokens_ && !error_) {
        in_step_ = true;
        lk.unlock();
        try {
          drafted = drafter_.extend_provisional(params_, rng_);
        } catch (...) {
          lk.lock();
          error_ = std::current_exception();
          lk.unlock();
        }
        lk.lock();
        in_step_ = false;
        if (drafted) drafted_ += 1;
        cv_.notify_all();
      }
      if (!drafted) cv_.wait_for(lk, std::chrono::microseconds(50));
    }
  }

  TreeDrafter& drafter_;
  const SamplingParams& params_;
  Rng& rng_;
  const StreamedWeights& stream_;
  const int32_t max_tokens_;
  const int threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool active_ = false, in_step_ = false, quit_ = false;
  int64_t drafted_ = 0;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace

TreeGeneration generate_local_tree(const Model& target, const Model& draft, const std::vector<int32_t>& prompt_ids,
                                   const GenerateOptions& options, const TreeOptions& o, const TokenCallback& on_token) {
  if (draft.config().vocab_size != target.config().vocab_size)
    throw Error("draft vocab_size " + std::to_string(draft.config().vocab_size) + " differs from the target's " +
                std::to_string(target.config().vocab_size));
  validate(o);
  const auto t0 = SteadyClock::now();
  c10::InferenceMode guard;
  TargetDecoder dec(target, prompt_ids, options);
  TreeDrafter drafter(draft, o.max_children);
  drafter.begin(prompt_ids);
  FallbackThreshold threshold(o.initial_alpha);
  Rng draft_rng(draft_seed(options.sampling.seed));
  const SamplingParams& params = options.sampling;
  const StreamedWeights* stream = target.stream();
  const bool provisional = o.provisional && stream != nullptr && o.max_provisional > 0;

  std::unique_ptr<ProvisionalWorker> worker;
  if (provisional)
    worker = std::make_unique<ProvisionalWorker>(drafter, params, draft_rng, *stream, o.max_provisional, o.threads);

  TreeGeneration out;
  Generation& g = out.generation;
  TreeStats& s = out.tree;
  g.stats.prefill_ms = ms_since(t0);
  int64_t nodes = 0, accepted = 0;
  while (!dec.finished()) {
    const int32_t cap = std::min(dec.room(), o.fallback ? o.max_tree_nodes : o.tree_nodes);
    drafter.start_round(params, draft_rng, cap, o.fallback ? threshold.alpha() : 0.0);
    while (drafter.size() < cap) {
      if (o.fallback && drafter.size() > 0 && threshold.fall_back(drafter.tree_confidence())) break;
      if (drafter.grow(params, draft_rng, std::min(o.draft_width, cap - drafter.size())) == 0) break;
    }
    const DraftTree tree = drafter.tree();
    RoundResult r;
    if (worker) {
      worker->start();
      r = dec.verify(tree);
      s.provisional_tokens += worker->stop();
    } else {
      r = dec.verify(tree);
    }
    if (o.fallback) threshold.update(drafter.outcome(r.verdict));
    s.provisional_kept += drafter.accept(r.verdict);
    s.rounds += 1;
    s.target_ms += r.forward_ms;
    nodes += tree.size();
    for (int32_t i = 0; i < tree.size(); ++i)
      if (tree.parents[i] != i - 1) {
        s.branched_trees += 1;
        break;
      }
    accepted += r.verdict.accepted;
    for (int32_t tok : r.verdict.tokens) {
      g.output_ids.push_back(tok);
      if (on_token) on_token(tok);
    }
  }
  s.draft = drafter.stats();
  s.final_alpha = threshold.alpha();
  g.finish_reason = finish_reason_name(dec.finish());
  g.stats.target_forwards = dec.forwards();
  g.stats.new_tokens = static_cast<int64_t>(g.output_ids.size());
  g.stats.wall_ms = ms_since(t0);
  g.stats.ms_per_token = g.stats.new_tokens ? g.stats.wall_ms / g.stats.new_tokens : 0.0;
  if (s.rounds) {
    s.tau = static_cast<double>(g.stats.new_tokens) / static_cast<double>(s.rounds);
    s.mean_tree_nodes = static_cast<double>(nodes) / static_cast<double>(s.rounds);
    s.accepted_per_round = static_cast<double>(accepted) / static_cast<double>(s.rounds);
  }
  return out;
}

}  // namespace splitspec

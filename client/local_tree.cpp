#include "client/local_tree.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <future>

#include "common/error.h"
#include "common/fallback_threshold.h"
#include "common/stopwatch.h"
#include "common/target_decoder.h"
#include "common/threads.h"
#include "common/tree_drafter.h"

namespace splitspec {

namespace {

void validate(const TreeOptions& o) {
  if (o.tree_nodes < 1) throw Error("tree-nodes must be at least 1");
  if (o.max_tree_nodes < 1) throw Error("max-tree-nodes must be at least 1");
  if (o.max_provisional < 0) throw Error("max-provisional must be >= 0");
  if (o.max_children < 1) throw Error("max-children must be at least 1");
  FallbackThreshold check(o.initial_alpha);  // throws on an alpha outside (0, 1]
}

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

  TreeGeneration out;
  Generation& g = out.generation;
  TreeStats& s = out.tree;
  g.stats.prefill_ms = ms_since(t0);
  int64_t nodes = 0, accepted = 0;
  while (!dec.finished()) {
    const int32_t cap = std::min(dec.room(), o.fallback ? o.max_tree_nodes : o.tree_nodes);
    drafter.start_round(params, draft_rng, cap);
    while (drafter.size() < cap) {
      if (o.fallback && drafter.size() > 0 && threshold.fall_back(drafter.tree_confidence())) break;
      if (!drafter.grow(params, draft_rng)) break;
    }
    const DraftTree tree = drafter.tree();
    RoundResult r;
    if (provisional) {
      // The target verifies on its own thread; this one drafts on only
      // while that forward waits for weights, so the two never compute at
      // once (the paper's rule that provisional work must not slow the
      // verification down).
      auto verification = std::async(std::launch::async, [&] {
        set_compute_threads(o.threads);
        c10::InferenceMode inner;
        return dec.verify(tree);
      });
      while (verification.wait_for(std::chrono::microseconds(0)) != std::future_status::ready) {
        if (stream->forward_waiting() && drafter.provisional() < o.max_provisional) {
          if (drafter.extend_provisional(params, draft_rng)) {
            s.provisional_tokens += 1;
            continue;
          }
        }
        verification.wait_for(std::chrono::microseconds(50));
      }
      r = verification.get();
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

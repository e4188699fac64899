#pragma once
// EdgeLLM's local decoding (§III): the draft grows a
// width-adaptive token tree, the target verifies it in one forward, the
// self-adaptive fallback decides when, and provisional generation keeps the
// draft busy while the target's weights stream in. Each technique has its
// own switch, for ablation. Exact: greedy output equals the target's own,
// sampled output has the target's distribution.
#include <vector>

#include "client/generation.h"
#include "common/engine/model.h"
#include "common/drafting/model_drafter.h"

namespace splitspec {

struct TreeOptions {
  // Off: every tree has `tree_nodes` nodes ("tree only"). On: the tree grows
  // until its confidence falls below alpha (Eq. 3), up to `max_tree_nodes`.
  bool fallback = true;
  int32_t tree_nodes = 32;
  int32_t max_tree_nodes = 32;
  double initial_alpha = 0.01;  // the paper's default
  // Draft past the tree while the target's forward waits for weights; never
  // while it computes. Needs a streamed target (there is nothing to wait
  // for otherwise). `max_provisional` bounds the extra draft tokens: they
  // live in the draft's preallocated KV cache, so they never take memory
  // from the target's streaming budget.
  bool provisional = true;
  int32_t max_provisional = 16;
  int32_t max_children = 2;  // greedy alternatives per node
  // Tree nodes drafted together in one draft forward (1: the paper's
  // decoder). A forward of 8 tokens costs the demo draft about 2.3 of one.
  // The fallback is checked between these steps, so a tree may pass the
  // point where it would have stopped by up to draft_width - 1 nodes.
  int32_t draft_width = 8;
  int threads = 1;           // compute threads of the provisional worker
};

struct TreeStats {
  DrafterStats draft;  // per-depth acceptance, drafting time, forwards
  int64_t rounds = 0;  // verifications
  double tau = 0;      // tokens per verification
  double mean_tree_nodes = 0;
  int64_t branched_trees = 0;     // trees that were not a single chain
  double accepted_per_round = 0;  // draft tokens accepted per verification
  double final_alpha = 0;
  double target_ms = 0;       // verification forwards
  int64_t provisional_tokens = 0;  // drafted while the target loaded
  int64_t provisional_kept = 0;    // of those, kept (became the next tree's start)
};

struct TreeGeneration {
  Generation generation;
  TreeStats tree;
};

// Throws splitspec::Error when the vocabularies differ, for invalid options,
// and for the prompt and option errors generate_local_ar reports.
TreeGeneration generate_local_tree(const Model& target, const Model& draft, const std::vector<int32_t>& prompt_ids,
                                   const GenerateOptions& options, const TreeOptions& tree,
                                   const TokenCallback& on_token = {});

}  // namespace splitspec

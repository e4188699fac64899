#pragma once
// Settings of the `model-tree` drafter (EdgeLLM's width-adaptive token tree).
#include <cstdint>
#include <map>
#include <string>

namespace splitspec {

class DrafterOptions;

struct TreeOptions {
  // Off: every tree has `tree_nodes` nodes ("tree only"). On: the tree grows
  // until its confidence falls below alpha (Eq. 3), up to `max_tree_nodes`.
  bool fallback = true;
  int32_t tree_nodes = 32;
  int32_t max_tree_nodes = 32;
  double initial_alpha = 0.01;  // EdgeLLM's default
  // Draft past the tree while the verifier's forward waits for weights;
  // never while it computes (a verifier says when: Verifier::spare_compute).
  // `max_provisional` bounds the extra draft tokens: they live in the
  // draft's preallocated KV cache, so they never take memory from the
  // target's streaming budget.
  bool provisional = true;
  int32_t max_provisional = 16;
  int32_t max_children = 2;  // greedy alternatives per node
  // Tree nodes drafted together in one draft forward (1: EdgeLLM's decoder).
  // A forward of 8 tokens costs the demo draft about 2.3 of one. The
  // fallback is checked between these steps, so a tree may pass the point
  // where it would have stopped by up to draft_width - 1 nodes.
  int32_t draft_width = 8;
  // Throws splitspec::Error for values out of range.
  void validate() const;

  // As the drafter's own settings (`--drafter-option KEY=VALUE`, lut's
  // road): fallback and provisional (1 or 0), nodes, max_nodes, alpha,
  // max_provisional, max_children, draft_width; a key not given keeps its
  // default. read() takes them, validated; options() writes them all.
  static TreeOptions read(DrafterOptions& options);
  std::map<std::string, std::string> options() const;
};

}  // namespace splitspec

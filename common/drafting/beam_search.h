#pragma once
// ReDrafter's drafting step: beam search over the recurrent head (section
// 3.2), then dynamic tree attention (section 3.3): the beams, all of one
// length, share prefixes, and deduplicated into one token tree they cost
// fewer verification rows than W x L. Our verifier already takes any tree
// with its mask, so a trie over the beams is all the packing needs.
#include <cstdint>
#include <vector>

#include "common/decoding/token_tree.h"

namespace splitspec {

class RecurrentHead;

struct Beams {
  std::vector<std::vector<int32_t>> tokens;  // best first, each `length` long
  std::vector<float> log_probs;              // under the head, per beam
};

// Deterministic beam search of `width` beams, `length` tokens each, after
// `token` (the target's last) under hidden state h: every step keeps the
// `width` best extensions of the live beams by summed log-probability (ties:
// lower beam, then lower token). The first step has one beam to extend.
Beams beam_search(const RecurrentHead& head, const float* h, int32_t token, int32_t width, int32_t length);

// The beams as one tree: a node per distinct prefix, children in the order of
// the best beam through them (so a tree cut to its first n nodes keeps the
// best beams' prefixes). Nodes carry no q: they are chosen, not drawn.
DraftTree beams_to_tree(const std::vector<std::vector<int32_t>>& beams);

}  // namespace splitspec

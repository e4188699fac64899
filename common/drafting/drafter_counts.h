#pragma once
// What a drafter counts, under the names the public Stats shows them by:
// the drafter's own statistics (DrafterStats, drafter.h) are one, and so is
// the public DraftStats, so the client hands them over whole. Part of the
// public API: the installed <splitspec/client.h> holds this file's text
// (client/package/CMakeLists.txt), so it includes standard headers only.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace splitspec {

struct DrafterCounts {
  // Per depth of the tree (a chain's position): rounds whose draft reached
  // it, and rounds that accepted a token there.
  std::vector<int64_t> proposed_per_position;
  std::vector<int64_t> accepted_per_position;
  double draft_ms = 0;         // drafting on this device, in the background too
  int64_t draft_forwards = 0;  // draft-model forwards, where there is a model
  // Technique-specific. Summed, except sizes ending "_bytes", which are the
  // later generation's.
  std::map<std::string, double> drafter_counters;
  // model-tree.
  double final_alpha = 0;          // the fallback threshold at the end
  int64_t provisional_tokens = 0;  // drafted while weights loaded
  int64_t provisional_kept = 0;    //   of those, kept for the next tree
};

}  // namespace splitspec

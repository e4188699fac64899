#pragma once
// Drafters by name. The built-in ones are listed in drafters.inc, one line
// each; applications and tests may register their own at run time. Either
// way the round loop, the verifiers and the client run them unchanged.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/drafting/drafter.h"

namespace splitspec {

class Model;

// What a technique keeps across the generations of one client (DIAA's tables
// learn from every generation): a factory finds here what it left before, or
// puts it there. A client runs one generation at a time.
struct DrafterState {
  std::shared_ptr<void> value;
};

// What a verification's time is mostly made of, for drafters that size their
// trees by it: compute (an in-memory target: each node costs), the target's
// weights read from disk (nodes nearly free) or a network round trip (a
// node saves round trips).
enum class VerifyCost { kCompute, kWeightReads, kRoundTrip };

// Everything a drafter may be built from.
struct DrafterSpec {
  std::shared_ptr<const Model> draft;  // the draft model, for drafters that need one
  // Settings of techniques that take their own ("key" -> "value").
  std::map<std::string, std::string> options;
  int threads = 1;  // compute threads of any worker thread the drafter runs
  VerifyCost verify_cost = VerifyCost::kCompute;
  int64_t vocab_size = 0;             // the verifier's target's
  int64_t hidden_size = 0;            // the verifier's target's (0: unknown)
  // Where the target's files are on this device: the local target's
  // directory, else the tokenizer's (a head trained for the target ships
  // beside both).
  std::string target_dir;
  // The local target's file or directory as given, else the tokenizer's: a
  // drafter reading the model's own heads (mtp) opens it.
  std::string target_path;
  std::string tokenizer_fingerprint;  // the client's tokenizer's, when it has one
  std::shared_ptr<DrafterState> state = std::make_shared<DrafterState>();
};

using DrafterFactory = std::function<std::unique_ptr<Drafter>(const DrafterSpec&)>;

// What a technique is, for the client and the CLI, which never single a
// drafter out by name.
enum DrafterTrait : unsigned {
  kNeedsDraftModel = 1u << 0,  // drafts with the draft model (ClientOptions::draft_dir)
  kDraftsNothing = 1u << 1,    // plain decoding: each round is one target token
  kChainOfGamma = 1u << 2,     // drafts SpeculativeParams::gamma tokens a round
};

struct DrafterInfo {
  std::string name;
  std::string summary;  // one line, for help texts
  unsigned traits = 0;  // DrafterTrait flags
  DrafterFactory make;
  bool has(DrafterTrait t) const { return (traits & t) != 0; }
};

// Built-in drafters, then registered ones, by name.
std::vector<DrafterInfo> drafters();
// Throws splitspec::Error naming the known drafters.
DrafterInfo find_drafter(const std::string& name);
// Throws splitspec::Error for a name already taken.
void register_drafter(DrafterInfo info);
// "none, model, model-tree" (for messages and help).
std::string drafter_names();

}  // namespace splitspec

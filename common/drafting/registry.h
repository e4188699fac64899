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
#include "common/drafting/tree_options.h"

namespace splitspec {

class Model;

// Everything a drafter may be built from.
struct DrafterSpec {
  std::shared_ptr<const Model> draft;  // the draft model, for drafters that need one
  TreeOptions tree;                    // model-tree
  // Settings of techniques that take their own ("key" -> "value").
  std::map<std::string, std::string> options;
  int threads = 1;  // compute threads of any worker thread the drafter runs
};

using DrafterFactory = std::function<std::unique_ptr<Drafter>(const DrafterSpec&)>;

struct DrafterInfo {
  std::string name;
  std::string summary;  // one line, for help texts
  bool needs_draft_model = false;
  DrafterFactory make;
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

#include "common/model/family.h"

#include <deque>
#include <mutex>

#include "common/util/error.h"

namespace splitspec {

#define FAMILY(make) Family make();
#include "common/model/families/families.inc"
#undef FAMILY

namespace {

struct Registry {
  std::mutex mu;
  // A deque: a family found stays where it is while others are registered.
  std::deque<Family> families;
};

void check_free(const Registry& r, const Family& f) {
  for (const Family& g : r.families) {
    if (g.name == f.name) throw Error("model family '" + f.name + "' is already registered");
    for (const HfArchitecture& a : g.hf)
      for (const HfArchitecture& b : f.hf)
        if (a.name == b.name) throw Error("Hugging Face architecture '" + b.name + "' is already " + g.name + "'s");
  }
}

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    for (Family f : {
#define FAMILY(make) make(),
#include "common/model/families/families.inc"
#undef FAMILY
         }) {
      check_free(*reg, f);
      for (const ChatTemplateDef& t : f.new_chat_templates) register_chat_template(t);
      for (const PreTokenizerDef& p : f.new_pre_tokenizers) register_pre_tokenizer(p);
      reg->families.push_back(std::move(f));
    }
    return reg;
  }();
  return *r;
}

}  // namespace

std::vector<const Family*> families() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<const Family*> out;
  for (const Family& f : r.families) out.push_back(&f);
  return out;
}

std::string family_names() {
  std::string s;
  for (const Family* f : families()) s += (s.empty() ? "" : ", ") + f->name;
  return s;
}

const Family& find_family(const std::string& name) {
  for (const Family* f : families())
    if (f->name == name) return *f;
  throw Error("architecture '" + name + "' is not supported; SplitSpec runs " + family_names());
}

void register_family(Family f) {
  if (f.name.empty() || f.hf.empty()) throw Error("a model family needs a name and a Hugging Face architecture");
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    check_free(r, f);
  }
  for (const ChatTemplateDef& t : f.new_chat_templates) register_chat_template(t);
  for (const PreTokenizerDef& p : f.new_pre_tokenizers) register_pre_tokenizer(p);
  std::lock_guard<std::mutex> lock(r.mu);
  r.families.push_back(std::move(f));
}

}  // namespace splitspec

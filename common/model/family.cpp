#include "common/model/family.h"

#include <algorithm>
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

// The family's templates and pre-tokenizers into the tokenizer's tables.
// Their names are checked first, and the pre-tokenizers (which may fail to
// compile) go first, so that a family refused leaves nothing behind.
void register_tokenizer_parts(const Family& f) {
  const std::vector<std::string> templates = chat_template_names();
  for (const ChatTemplateDef& t : f.chat_templates)
    if (std::find(templates.begin(), templates.end(), t.name) != templates.end())
      throw Error("chat template '" + t.name + "' is already registered");
  for (const PreTokenizerDef& p : f.pre_tokenizers)
    for (const std::string& name : p.names)
      if (is_supported_pre_tokenizer(name)) throw Error("pre-tokenizer '" + name + "' is already registered");
  for (const PreTokenizerDef& p : f.pre_tokenizers) register_pre_tokenizer(p);
  for (const ChatTemplateDef& t : f.chat_templates) register_chat_template(t);
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
      register_tokenizer_parts(f);
      reg->families.push_back(std::move(f));
    }
    return reg;
  }();
  return *r;
}

// The built-in families' templates and pre-tokenizers are in the
// tokenizer's tables before main(), so that a vocabulary read alone (a
// client's, fetched from its server) finds them.
const bool kBuiltInRegistered = (registry(), true);

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

const Family* lookup_family(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const Family& f : r.families)
    if (f.name == name) return &f;
  return nullptr;
}

const Family& find_family(const std::string& name) {
  if (const Family* f = lookup_family(name)) return *f;
  throw Error("architecture '" + name + "' is not supported; SplitSpec runs " + family_names());
}

void register_family(Family f) {
  if (f.name.empty() || f.hf.empty()) throw Error("a model family needs a name and a Hugging Face architecture");
  (void)kBuiltInRegistered;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  check_free(r, f);
  register_tokenizer_parts(f);
  r.families.push_back(std::move(f));
}

}  // namespace splitspec

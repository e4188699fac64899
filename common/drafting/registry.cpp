#include "common/drafting/registry.h"

#include <mutex>

#include "common/util/error.h"

namespace splitspec {

#define DRAFTER(name, summary, traits, factory) std::unique_ptr<Drafter> factory(const DrafterSpec&);
#include "common/drafting/drafters.inc"
#undef DRAFTER

namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

std::vector<DrafterInfo>& registered() {
  static std::vector<DrafterInfo> list;
  return list;
}

}  // namespace

std::vector<DrafterInfo> drafters() {
  std::vector<DrafterInfo> out = {
#define DRAFTER(name, summary, traits, factory) {name, summary, traits, factory},
#include "common/drafting/drafters.inc"
#undef DRAFTER
  };
  std::lock_guard<std::mutex> lock(registry_mutex());
  out.insert(out.end(), registered().begin(), registered().end());
  return out;
}

std::string drafter_names() {
  std::string out;
  for (const DrafterInfo& d : drafters()) out += (out.empty() ? "" : ", ") + d.name;
  return out;
}

DrafterInfo find_drafter(const std::string& name) {
  for (DrafterInfo& d : drafters())
    if (d.name == name) return d;
  throw Error("unknown drafter '" + name + "' (" + drafter_names() + ")");
}

void register_drafter(DrafterInfo info) {
  if (info.name.empty() || !info.make) throw Error("a drafter needs a name and a factory");
  for (const DrafterInfo& d : drafters())
    if (d.name == info.name) throw Error("a drafter named '" + info.name + "' exists already");
  std::lock_guard<std::mutex> lock(registry_mutex());
  registered().push_back(std::move(info));
}

}  // namespace splitspec

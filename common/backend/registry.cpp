#include "common/backend/registry.h"

#include <mutex>

#include "common/backend/cpu_backend.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::pair<std::string, BackendFactory>> kinds;
};

// Never destroyed: static initialisers of other libraries register into it.
Registry& registry() {
  static auto* r = [] {
    auto* r = new Registry;
    r->kinds.emplace_back("cpu", [](const std::string& path, const BackendOptions& o) -> std::shared_ptr<Backend> {
      if (o.device.index != 0) throw Error("device cpu:" + std::to_string(o.device.index) + ": there is one CPU device");
      std::shared_ptr<Model> m = Model::load(path, o.weight_type);
      m->set_kv_type(o.kv_type);
      return std::make_shared<CpuBackend>(std::move(m));
    });
    return r;
  }();
  return *r;
}

}  // namespace

std::string Device::str() const { return kind == "cpu" || index == 0 ? kind : kind + ":" + std::to_string(index); }

Device parse_device(const std::string& text) {
  Device d;
  const size_t colon = text.find(':');
  d.kind = text.substr(0, colon);
  if (d.kind != "cpu" && d.kind != "cuda")
    throw Error("unknown device '" + text + "' (cpu, cuda or cuda:N)");
  if (colon != std::string::npos) {
    const std::string index = text.substr(colon + 1);
    if (index.empty() || index.size() > 3 || index.find_first_not_of("0123456789") != std::string::npos)
      throw Error("device '" + text + "': the index after ':' is a GPU's number (cuda:0, cuda:1, ...)");
    d.index = std::stoi(index);
    if (d.kind == "cpu" && d.index != 0) throw Error("device '" + text + "': there is one CPU device (cpu)");
  }
  return d;
}

bool register_backend(const std::string& kind, BackendFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  for (const auto& k : r.kinds)
    if (k.first == kind) return true;
  r.kinds.emplace_back(kind, std::move(factory));
  return true;
}

std::vector<std::string> backend_kinds() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  std::vector<std::string> out;
  for (const auto& k : r.kinds) out.push_back(k.first);
  return out;
}

std::shared_ptr<Backend> open_backend(const std::string& path, const BackendOptions& options) {
  BackendFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    for (const auto& k : r.kinds)
      if (k.first == options.device.kind) factory = k.second;
  }
  if (!factory) {
    std::string have;
    for (const std::string& k : backend_kinds()) have += (have.empty() ? "" : ", ") + k;
    throw Error("device " + options.device.str() + ": this program was built without the " + options.device.kind +
                " backend (it has: " + have + "); build where nvcc is found, or with -DSPLITSPEC_CUDA=ON");
  }
  return factory(path, options);
}

}  // namespace splitspec

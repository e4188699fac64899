#include "common/backend/backend.h"

#include "common/util/error.h"

namespace splitspec {

void KVStore::read_rows(int64_t, int64_t, int64_t, float*, float*) const {
  throw Error("this backend does not hand out its keys and values (a drafter reading them runs beside a CPU target)");
}

std::string Numerics::differences(const Numerics& o) const {
  std::string out;
  auto field = [&](const char* what, const std::string& a, const std::string& b, bool unknown_is_same) {
    if (a == b || (unknown_is_same && (a.empty() || b.empty()))) return;
    if (!out.empty()) out += ", ";
    out += std::string(what) + " " + (a.empty() ? "?" : a) + " vs " + (b.empty() ? "?" : b);
  };
  field("backend", backend, o.backend, false);
  field("arch", arch, o.arch, false);
  field("kernels", kernels, o.kernels, false);
  field("weight type", weight_type, o.weight_type, false);
  field("weights digest", weights_digest, o.weights_digest, true);
  // Servers before the field said nothing: f32.
  field("kv cache", kv_type.empty() ? "f32" : kv_type, o.kv_type.empty() ? "f32" : o.kv_type, false);
  return out;
}

std::string Numerics::summary() const {
  return backend + " " + arch + " kernels " + kernels + ", " + weight_type + " " +
         (weights_digest.empty() ? "(no digest)" : weights_digest) + ", kv " + kv_type;
}

}  // namespace splitspec

#include "common/drafting/drafter_options.h"

#include <cstdlib>

#include "common/util/error.h"

namespace splitspec {

DrafterOptions::DrafterOptions(std::string drafter, const std::map<std::string, std::string>& values)
    : drafter_(std::move(drafter)), values_(values) {}

const std::string* DrafterOptions::find(const std::string& key) {
  known_.insert(key);
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

std::string DrafterOptions::text(const std::string& key, const std::string& fallback) {
  const std::string* v = find(key);
  return v ? *v : fallback;
}

int DrafterOptions::integer(const std::string& key, int fallback) {
  const std::string* v = find(key);
  if (!v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || x < -(1L << 30) || x > (1L << 30))
    throw Error("drafter " + drafter_ + ": option " + key + "=" + *v + " is not a whole number");
  return static_cast<int>(x);
}

double DrafterOptions::real(const std::string& key, double fallback) {
  const std::string* v = find(key);
  if (!v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0') throw Error("drafter " + drafter_ + ": option " + key + "=" + *v + " is not a number");
  return x;
}

void DrafterOptions::finish() const {
  for (const auto& [key, value] : values_)
    if (!known_.count(key)) {
      std::string names;
      for (const std::string& k : known_) names += (names.empty() ? "" : ", ") + k;
      throw Error("drafter " + drafter_ + " has no option '" + key + "'" +
                  (names.empty() ? " (it takes none)" : " (it takes " + names + ")"));
    }
}

}  // namespace splitspec

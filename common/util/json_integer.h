#pragma once
// Integers read from JSON files, checked first. nlohmann's get<int>() turns
// a float such as 3e102 into an integer with undefined behaviour; the
// fuzzers (scripts/fuzz.sh) found it in four loaders.
#include <nlohmann/json.hpp>

#include <limits>
#include <string>
#include <vector>

#include "common/util/error.h"

namespace splitspec {

// `v` as T, or Error "KEY must be an integer in [MIN, MAX], got V".
template <class T>
T json_integer(const nlohmann::json& v, const std::string& key) {
  const bool fits = v.is_number_integer() &&
                    (v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                                            : v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                                                  v.get<int64_t>() <= std::numeric_limits<T>::max());
  if (!fits) {
    std::string got = v.dump();
    if (got.size() > 40) got = got.substr(0, 40) + "...";
    throw Error(key + " must be an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                std::to_string(std::numeric_limits<T>::max()) + "], got " + got);
  }
  return static_cast<T>(v.get<int64_t>());
}

// An array of such integers.
template <class T>
std::vector<T> json_integers(const nlohmann::json& v, const std::string& key) {
  if (!v.is_array()) throw Error(key + " must be an array of integers");
  std::vector<T> out;
  out.reserve(v.size());
  for (const auto& e : v) out.push_back(json_integer<T>(e, key));
  return out;
}

}  // namespace splitspec

#pragma once
// A Stats part as JSON, from the part's own field list (client.h).
#include <nlohmann/json.hpp>

#include "client/client.h"

namespace splitspec {

template <class Part>
void add_json(nlohmann::json& j, const Part& part) {
  Part::fields([&](const char* name, auto member, Merge) { j[name] = part.*member; });
}

// Every part.
inline nlohmann::json to_json(const Stats& s) {
  nlohmann::json j = nlohmann::json::object();
  Stats::parts(s, [&j](const char*, const auto& part) { add_json(j, part); });
  return j;
}

}  // namespace splitspec

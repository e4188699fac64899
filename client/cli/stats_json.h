#pragma once
// A Stats part as JSON, from the part's own field list (client.h).
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "client/client.h"

namespace splitspec {

template <class Part>
void add_json(nlohmann::json& j, const Part& part) {
  Part::fields([&](const char* name, auto member, Merge) { j[name] = part.*member; });
}

// "" for real times, else what was emulated, for every printed figure:
// "EMULATED: server forwards 30:0.3 ms, drafting x40".
inline std::string emulation_note(const Stats& s) {
  std::string parts;
  if (s.emulated_forward_fixed_ms > 0 || s.emulated_forward_per_row_ms > 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "server forwards %g:%g ms", s.emulated_forward_fixed_ms, s.emulated_forward_per_row_ms);
    parts = buf;
  }
  if (s.emulated_draft_factor > 1) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "drafting x%g", s.emulated_draft_factor);
    parts += (parts.empty() ? "" : ", ") + std::string(buf);
  }
  return parts.empty() ? "" : "EMULATED: " + parts;
}

// Every part.
inline nlohmann::json to_json(const Stats& s) {
  nlohmann::json j = nlohmann::json::object();
  Stats::parts(s, [&j](const char*, const auto& part) { add_json(j, part); });
  return j;
}

}  // namespace splitspec

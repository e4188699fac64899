#include "common/decoding/forward_emulation.h"

#include <cmath>
#include <cstdlib>

#include "common/util/error.h"

namespace splitspec {

namespace {

double parse_ms(const std::string& text, const std::string& spec) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < 0 || v > 10000)
    throw Error("emulate_forward_ms '" + spec + "': expected FIXED[:PER_ROW] in milliseconds, each in [0, 10000]");
  return v;
}

}  // namespace

std::string ForwardEmulation::spec() const {
  if (!enabled()) return "off";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g:%g", fixed_ms, per_row_ms);
  return buf;
}

ForwardEmulation ForwardEmulation::parse(const std::string& spec) {
  ForwardEmulation e;
  if (spec.empty() || spec == "off") return e;
  const size_t colon = spec.find(':');
  e.fixed_ms = parse_ms(spec.substr(0, colon), spec);
  if (colon != std::string::npos) e.per_row_ms = parse_ms(spec.substr(colon + 1), spec);
  return e;
}

}  // namespace splitspec

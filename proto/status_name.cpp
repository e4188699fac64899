#include "proto/status_name.h"

#include <array>

namespace splitspec {

std::string code_name(grpc::StatusCode code) {
  // In the order of the codes' values, 0 to 16.
  static constexpr std::array<const char*, 17> kNames = {
      "OK",        "CANCELLED",         "UNKNOWN",          "INVALID_ARGUMENT",    "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS",    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",      "UNIMPLEMENTED",    "INTERNAL",            "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  const int c = static_cast<int>(code);
  if (c >= 0 && c < static_cast<int>(kNames.size())) return kNames[c];
  return "code " + std::to_string(c);
}

}  // namespace splitspec

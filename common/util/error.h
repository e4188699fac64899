#pragma once
// One exception type for every user-facing failure: bad files, bad configs,
// bad arguments. Messages name the file or field at fault so the CLI can print
// them as they are.
#include <stdexcept>
#include <string>

namespace splitspec {

// client.h, installed alone, defines it too, token for token; the guard lets
// both be included together.
#ifndef SPLITSPEC_ERROR_DEFINED
#define SPLITSPEC_ERROR_DEFINED
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};
#endif

}  // namespace splitspec

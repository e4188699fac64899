#pragma once
// FNV-1a 64 of bytes, in hex: the tokenizer fingerprints client and server
// compare (equal digests: identical vocabularies).
#include <cstdint>
#include <cstdio>
#include <string>

namespace splitspec {

inline std::string fnv1a_hex(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace splitspec

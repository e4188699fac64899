#pragma once
// What the file-format fuzz targets share: an input is a JSON sidecar, then,
// after the first NUL byte (if any), the tensor file that goes with it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace splitspec::fuzz {

// A broken invariant is a finding: abort, so libFuzzer records the input.
inline void check(bool ok, const char* target, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "%s: invariant broken: %s\n", target, what);
    std::abort();
  }
}

inline bool write_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

struct SidecarInput {
  const uint8_t* json;
  size_t json_len;
  const uint8_t* tensors;  // nullptr when the input has no NUL
  size_t tensors_len;
};

inline SidecarInput split_sidecar(const uint8_t* p, size_t n) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(p, 0, n));
  const size_t json_len = nul ? static_cast<size_t>(nul - p) : n;
  return {p, json_len, nul ? nul + 1 : nullptr, nul ? n - json_len - 1 : 0};
}

}  // namespace splitspec::fuzz

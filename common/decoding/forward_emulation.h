#pragma once
// A slower accelerator, emulated: each target forward takes at least
// FIXED + PER_ROW x rows milliseconds, as a 7B target's verification on a
// datacenter GPU does, while the real (small, fast) target still computes
// every token, so tokens and acceptance stay real. The rest of the real
// forward's time is slept off, never shortened; the layers are paced across
// the modeled time, so an early exit after layer l is ready at l/L of it.
// Researchers run the real client and server in the paper's regimes with it
// (`splitspec-server --emulate-forward-ms`, docs/edge-cloud.md).
#include <cstdint>
#include <string>

namespace splitspec {

struct ForwardEmulation {
  double fixed_ms = 0;
  double per_row_ms = 0;

  bool enabled() const { return fixed_ms > 0 || per_row_ms > 0; }
  double modeled_ms(int64_t rows) const { return fixed_ms + per_row_ms * static_cast<double>(rows); }
  // "FIXED:PER_ROW" ("off" when disabled), as parse() reads it.
  std::string spec() const;
  // "FIXED[:PER_ROW]" in milliseconds, or "off"/"" for none. Throws
  // splitspec::Error for anything else, negative or absurd (over 10 s).
  static ForwardEmulation parse(const std::string& spec);
};

}  // namespace splitspec

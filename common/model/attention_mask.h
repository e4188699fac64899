#pragma once
// Which cached and new positions each new row of a forward may attend to.
#include <cstdint>
#include <vector>

namespace splitspec {

// Which earlier positions each new row may attend to: [rows, cols] of 0/1.
// Empty means causal.
struct AttentionMask {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> allowed;
  AttentionMask() = default;
  AttentionMask(int64_t r, int64_t c, bool value = false) : rows(r), cols(c), allowed(r * c, value ? 1 : 0) {}
  bool empty() const { return rows == 0; }
  uint8_t* row(int64_t i) { return allowed.data() + i * cols; }
  const uint8_t* row(int64_t i) const { return allowed.data() + i * cols; }
  bool at(int64_t i, int64_t j) const { return allowed[i * cols + j] != 0; }
};

}  // namespace splitspec

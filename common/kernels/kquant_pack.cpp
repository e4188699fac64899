// The packed K-quant layout (kquant.h): a byte permutation of each group's
// super-blocks, from one table per type built once.
#include <array>
#include <cstring>
#include <string>

#include "common/kernels/kquant.h"
#include "common/kernels/quant.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

// Where byte `o` of row r's super-block lies in its group's packed block.
int64_t packed_offset(WType t, int64_t r, int64_t o) {
  if (t == WType::Q4_K) {
    if (o < 2) return 2 * r + o;                                        // d
    if (o < 4) return 16 + 2 * r + (o - 2);                             // dmin
    if (o < 16) return 32 + 32 * ((o - 4) / 4) + 4 * r + (o - 4) % 4;   // scale words
    return 128 + 32 * ((o - 16) / 4) + 4 * r + (o - 16) % 4;            // quants
  }
  if (o < 128) return 656 + 32 * (o / 4) + 4 * r + o % 4;               // ql
  if (o < 192) return 144 + 32 * ((o - 128) / 4) + 4 * r + (o - 128) % 4;  // qh
  if (o < 208) return 16 + 8 * (o - 192) + r;                           // scales
  return 2 * r + (o - 208);                                             // d
}

template <WType T>
const std::array<uint16_t, kKPackRows * superblock_bytes(T)>& table() {
  static const auto t = [] {
    std::array<uint16_t, kKPackRows * superblock_bytes(T)> a{};
    for (int64_t r = 0; r < kKPackRows; ++r)
      for (int64_t o = 0; o < superblock_bytes(T); ++o)
        a[static_cast<size_t>(r * superblock_bytes(T) + o)] = static_cast<uint16_t>(packed_offset(T, r, o));
    return a;
  }();
  return t;
}

const uint16_t* table_of(WType t) { return t == WType::Q4_K ? table<WType::Q4_K>().data() : table<WType::Q6_K>().data(); }

// One group of kKPackRows rows between the layouts, into `out`.
void regroup(WType t, const uint8_t* in, uint8_t* out, int64_t cols, bool pack) {
  const uint16_t* map = table_of(t);
  const int64_t sb = superblock_bytes(t), rb = row_bytes(t, cols), nb = cols / kSuperBlock;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* packed = (pack ? out : const_cast<uint8_t*>(in)) + b * kKPackRows * sb;
    for (int64_t r = 0; r < kKPackRows; ++r) {
      const uint16_t* m = map + r * sb;
      if (pack) {
        const uint8_t* plain = in + r * rb + b * sb;
        for (int64_t o = 0; o < sb; ++o) packed[m[o]] = plain[o];
      } else {
        uint8_t* plain = out + r * rb + b * sb;
        for (int64_t o = 0; o < sb; ++o) plain[o] = packed[m[o]];
      }
    }
  }
}

}  // namespace

void kquant_regroup_rows(WType type, uint8_t* data, int64_t rows, int64_t cols, std::vector<uint8_t>& scratch,
                         bool pack) {
  if (type != WType::Q4_K && type != WType::Q6_K)
    throw Error(std::string("kquant: ") + wtype_name(type) + " has no packed layout");
  regroup_in_place(data, rows, kKPackRows, row_bytes(type, cols), scratch,
                   [&](const uint8_t* in, uint8_t* out) { regroup(type, in, out, cols, pack); });
}

void kquant_unpack_group(WType type, const uint8_t* group, int64_t cols, uint8_t* out) {
  regroup(type, group, out, cols, false);
}

void read_superblock(const MatrixRef& m, int64_t r, int64_t b, uint8_t* out) {
  const int64_t sb = superblock_bytes(m.type);
  const int64_t full = m.rows / kKPackRows * kKPackRows;
  if (!m.packed || r >= full) {
    std::memcpy(out, m.row(r) + b * sb, static_cast<size_t>(sb));
    return;
  }
  const uint8_t* packed = m.row(r / kKPackRows * kKPackRows) + b * kKPackRows * sb;
  const uint16_t* map = table_of(m.type) + (r % kKPackRows) * sb;
  for (int64_t o = 0; o < sb; ++o) out[o] = packed[map[o]];
}

}  // namespace splitspec

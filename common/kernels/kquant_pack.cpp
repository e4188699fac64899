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

// Where byte `o` of row r's super-block b lies in its group's packed block:
// each field is the group's rows side by side (G = kKPackRows), the 4-byte
// pieces of every row in turn, each piece G x 4 = 64 bytes, a cache line.
// A Q6_K super-block is 210 G bytes, half a line past a whole number, so
// an odd one puts its scales and d before its quants, which then start on
// a line as an even one's do.
int64_t packed_offset(WType t, int64_t b, int64_t r, int64_t o) {
  constexpr int64_t G = kKPackRows;
  if (t == WType::Q4_K) {
    if (o < 2) return 2 * r + o;                                              // d
    if (o < 4) return kq4_dmin + 2 * r + (o - 2);                             // dmin
    if (o < 16) return kq4_scales + 4 * G * ((o - 4) / 4) + 4 * r + (o - 4) % 4;  // scale words
    return kq4_quants + 4 * G * ((o - 16) / 4) + 4 * r + (o - 16) % 4;         // quants
  }
  const int64_t quants = kq6_quants(b), rest = kq6_rest(b);
  if (o < 128) return quants + 4 * G * (o / 4) + 4 * r + o % 4;                          // ql
  if (o < 192) return quants + kq6_qh + 4 * G * ((o - 128) / 4) + 4 * r + (o - 128) % 4;  // qh
  if (o < 208) return rest + G * (o - 192) + r;                                           // scales
  return rest + kq6_d + 2 * r + (o - 208);                                                // d
}

// Per type, the map of an even super-block, then an odd one's.
template <WType T>
const std::array<uint16_t, 2 * kKPackRows * superblock_bytes(T)>& table() {
  static const auto t = [] {
    constexpr int64_t sb = superblock_bytes(T);
    std::array<uint16_t, 2 * kKPackRows * sb> a{};
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t r = 0; r < kKPackRows; ++r)
        for (int64_t o = 0; o < sb; ++o)
          a[static_cast<size_t>((b * kKPackRows + r) * sb + o)] = static_cast<uint16_t>(packed_offset(T, b, r, o));
    return a;
  }();
  return t;
}

// Super-block b's map.
const uint16_t* table_of(WType t, int64_t b) {
  const uint16_t* even = t == WType::Q4_K ? table<WType::Q4_K>().data() : table<WType::Q6_K>().data();
  return even + (b % 2) * kKPackRows * superblock_bytes(t);
}

// One group of kKPackRows rows between the layouts, into `out`.
void regroup(WType t, const uint8_t* in, uint8_t* out, int64_t cols, bool pack) {
  const int64_t sb = superblock_bytes(t), rb = row_bytes(t, cols), nb = cols / kSuperBlock;
  for (int64_t b = 0; b < nb; ++b) {
    const uint16_t* map = table_of(t, b);
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
  const uint16_t* map = table_of(m.type, b) + (r % kKPackRows) * sb;
  for (int64_t o = 0; o < sb; ++o) out[o] = packed[map[o]];
}

}  // namespace splitspec

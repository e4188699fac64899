#pragma once
// The types a weight matrix is stored and computed in, each in llama.cpp's
// block layout, so our files, GGUF files and byte counts compare one to one.
// Blocks of 32 weights, a half-precision scale d first (m: a half min):
//   Q8_0: d, 32 x int8 q; weight = d * q.
//   Q4_0: d, 16 bytes; byte i holds weight i in its low nibble and weight
//         i + 16 in its high nibble; weight = d * (nibble - 8).
//   Q4_1: d, m, the same 16 bytes; weight = d * nibble + m.
//   Q5_0: d, 4 bytes qh, 16 bytes as Q4_0's; bit i of qh is weight i's fifth
//         bit (i < 32, the same index as the weight); weight = d * (q - 16).
//   Q5_1: d, m, qh, 16 bytes; weight = d * q + m.
//   IQ4_NL: d, 16 bytes as Q4_0's; weight = d * kIq4Values[nibble].
// Super-blocks of 256 weights (kquant.h): llama.cpp's K-quants Q2_K .. Q6_K
// and IQ4_XS (eight 32-weight sub-blocks of IQ4_NL's values under 6-bit
// scales). Q4_K and Q6_K are packed on x86, the rest computed as stored.
// Every type is written (quant.h) except IQ4_XS, which only files from
// llama.cpp hold. Free of LibTorch, so the kernels build and are tested on
// their own (cross-compiled for ARM too).
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace splitspec {

// New types go at the end: the numbers are in weight digests.
enum class WType : uint8_t { F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS };
constexpr int kWTypes = 15;
constexpr int64_t kQBlock = 32;  // weights per 32-weight block
constexpr int64_t kSuperBlock = 256;  // weights per super-block

// IQ4_NL's and IQ4_XS's sixteen values, a non-uniform grid (llama.cpp's
// kvalues_iq4nl).
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q2_k", "q3_k",
// "q4_1", "q5_0", "q5_1", "iq4_nl", "iq4_xs".
const char* wtype_name(WType t);
// Accepts those names in any case; nullopt otherwise.
std::optional<WType> parse_wtype(const std::string& name);
// parse_wtype, also taking llama.cpp's mix names q4_k_m, q5_k_m and q3_k_m
// (for q4_k, q5_k and q3_k: tensor_type gives such a model's per-tensor
// types), or a splitspec::Error listing the names: the types a model is
// converted to (is_writable).
WType parse_weight_type(const std::string& name);
// The 32-weight block types, which the kernels read packed.
constexpr bool is_quantized(WType t) {
  return t == WType::Q8_0 || t == WType::Q4_0 || t == WType::Q4_1 || t == WType::Q5_0 || t == WType::Q5_1 ||
         t == WType::IQ4_NL;
}
// The super-block types, computed against activations quantized as
// llama.cpp's Q8_K (kquant.h).
constexpr bool is_kquant(WType t) {
  return t == WType::Q4_K || t == WType::Q5_K || t == WType::Q6_K || t == WType::Q2_K || t == WType::Q3_K ||
         t == WType::IQ4_XS;
}
// The types with a quantizer: all but IQ4_XS, which is read, not written.
constexpr bool is_writable(WType t) { return t != WType::IQ4_XS; }
// Stored in blocks with their own scales (rows of bytes in a safetensors file).
constexpr bool is_block_type(WType t) { return is_quantized(t) || is_kquant(t); }
// 32-weight blocks with a min (weight = d * q + m).
constexpr bool block_has_min(WType t) { return t == WType::Q4_1 || t == WType::Q5_1; }
// 32-weight blocks with a fifth bit per weight (4 bytes qh).
constexpr bool block_has_high_bits(WType t) { return t == WType::Q5_0 || t == WType::Q5_1; }
// Bytes per super-block of 256 weights.
constexpr int64_t superblock_bytes(WType t) {
  return t == WType::Q4_K   ? 144
         : t == WType::Q5_K ? 176
         : t == WType::Q2_K ? 84
         : t == WType::Q3_K ? 110
         : t == WType::IQ4_XS ? 136
                              : 210;
}
// Bytes per 32 weights of a 32-weight block type or a float type (Q8_0 34,
// Q4_0 and IQ4_NL 18, Q4_1 20, Q5_0 22, Q5_1 24, F16 64, F32 128).
constexpr int64_t block_bytes(WType t) {
  switch (t) {
    case WType::F32: return 4 * kQBlock;
    case WType::Q8_0: return 2 + kQBlock;
    case WType::Q4_0:
    case WType::IQ4_NL: return 2 + kQBlock / 2;
    case WType::Q4_1: return 4 + kQBlock / 2;
    case WType::Q5_0: return 6 + kQBlock / 2;
    case WType::Q5_1: return 8 + kQBlock / 2;
    default: return 2 * kQBlock;
  }
}
// A 32-weight block's quant bytes (the rest, before them, is its header:
// d, then m, then qh, as the type has them).
constexpr int64_t block_quant_bytes(WType t) { return t == WType::Q8_0 ? kQBlock : kQBlock / 2; }
// Bytes of one row of `cols` weights; 32-weight block types need cols % 32
// == 0, super-block types cols % 256 == 0.
constexpr int64_t row_bytes(WType t, int64_t cols) {
  return is_kquant(t)      ? cols / kSuperBlock * superblock_bytes(t)
         : is_quantized(t) ? cols / kQBlock * block_bytes(t)
                           : cols * (block_bytes(t) / kQBlock);
}
// The weights a row's length must be a multiple of (1 for float types).
constexpr int64_t block_weights(WType t) { return is_kquant(t) ? kSuperBlock : is_quantized(t) ? kQBlock : 1; }

// Rows per group of a packed quantized matrix (below).
constexpr int64_t kPackRows = 16;

// The types the kernels read packed, so a model copies them at load: the
// 32-weight block types everywhere, and Q4_K and Q6_K on x86, whose kernels
// compute a row in each 32-bit lane of a register (kquant.h has that
// layout; NEON reads K-quants as stored).
constexpr bool stored_packed(WType t) {
#if defined(__x86_64__)
  if (t == WType::Q4_K || t == WType::Q6_K) return true;
#endif
  return is_quantized(t);
}

// Buffers that start on a 64-byte cache line. glibc's malloc puts a large
// buffer 16 bytes past a page, where each 64-byte piece of a packed group
// would span two lines and every 512-bit load of one read both.
template <class T>
struct LineAllocator {
  using value_type = T;
  LineAllocator() = default;
  template <class U>
  LineAllocator(const LineAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, std::align_val_t{64}); }
  friend bool operator==(const LineAllocator&, const LineAllocator&) { return true; }
  friend bool operator!=(const LineAllocator&, const LineAllocator&) { return false; }
};
// The bytes of a matrix a model holds in memory (copied, converted or packed).
using WeightBytes = std::vector<uint8_t, LineAllocator<uint8_t>>;

// A matrix of `rows` x `cols` weights of type `type`. Does not own `data`.
// Plain: rows back to back, row_bytes(type, cols) apart (the file layout).
// Packed (stored_packed types only): the same bytes regrouped for the
// kernels; K-quants as kquant.h says. For the 32-weight block types, each
// group of 16 rows holds, block by block, the 16 rows' d's, then their m's
// (Q4_1, Q5_1), then their qh's (Q5_0, Q5_1) with the bits reordered
// (packed_qh below), then their quants in 4-byte pieces: piece k of every row
// in turn (row 0's bytes 4k..4k+3, row 1's, ...), so one 64-byte load gives
// 16 rows' next four bytes. The groups lie in pairs (rows 32p .. 32p + 31)
// whose blocks alternate, block b of the first group then block b of the
// second (packed_blocks below), so a body computing both reads one stream;
// a last odd group stands alone. Rows past the last whole group follow,
// plain. quant.h converts.
struct MatrixRef {
  WType type = WType::F32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  bool packed = false;
  // Row r of a plain matrix (or of a packed one's plain tail).
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes(type, cols); }
  int64_t bytes() const { return rows * row_bytes(type, cols); }
};

// Where a packed 32-weight-block group's blocks lie: block b of the group
// whose first row is r (a multiple of kPackRows below the last whole group)
// starts at first + b * stride. `leads`: the group starts its stream (a
// pair's first, or a lone group), so a body reading it alone prefetches the
// whole stride.
struct PackedBlocks {
  const uint8_t* first;
  int64_t stride;
  bool leads;
  const uint8_t* block(int64_t b) const { return first + b * stride; }
};
constexpr int64_t kPairRows = 2 * kPackRows;
// Whether the group at row r shares its blocks' stream with a second group.
constexpr bool packed_in_pair(int64_t rows, int64_t r) { return r < rows / kPairRows * kPairRows; }
inline PackedBlocks packed_blocks(WType t, const void* data, int64_t rows, int64_t cols, int64_t r) {
  const auto* base = static_cast<const uint8_t*>(data);
  const int64_t bb = block_bytes(t);
  if (!packed_in_pair(rows, r)) return {base + r * row_bytes(t, cols), kPackRows * bb, true};
  const int64_t pair = r / kPairRows * kPairRows;
  return {base + pair * row_bytes(t, cols) + (r - pair) * bb, kPairRows * bb, r == pair};
}
inline PackedBlocks packed_blocks(const MatrixRef& m, int64_t r) { return packed_blocks(m.type, m.data, m.rows, m.cols, r); }

// A packed Q5_0/Q5_1 block's qh: byte b holds in bit k (0..3) the fifth bit
// of weight 4k + b and in bit 4 + k that of weight 16 + 4k + b, so the fifth
// bits of quant piece k's bytes (bit 4 of each byte) are (qh << (4 - k)) &
// 0x10101010 for the low nibbles and (qh >> k) & 0x10101010 for the high: a
// shift and a mask per piece in every body.
constexpr uint32_t packed_qh(uint32_t qh) {
  uint32_t out = 0;
  for (int b = 0; b < 4; ++b)
    for (int k = 0; k < 4; ++k) {
      out |= ((qh >> (4 * k + b)) & 1u) << (8 * b + k);
      out |= ((qh >> (16 + 4 * k + b)) & 1u) << (8 * b + 4 + k);
    }
  return out;
}
constexpr uint32_t plain_qh(uint32_t packed) {
  uint32_t out = 0;
  for (int b = 0; b < 4; ++b)
    for (int k = 0; k < 4; ++k) {
      out |= ((packed >> (8 * b + k)) & 1u) << (4 * k + b);
      out |= ((packed >> (8 * b + 4 + k)) & 1u) << (16 + 4 * k + b);
    }
  return out;
}

// IEEE half and bfloat16 to and from float. Widening is exact; narrowing
// rounds to nearest even (NaN stays NaN).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

}  // namespace splitspec

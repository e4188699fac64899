#pragma once
// The types a weight matrix is stored and computed in. Q8_0 and Q4_0 use
// llama.cpp's block layouts (32 weights per block, an IEEE half scale first),
// so our files, GGUF files and byte counts compare one to one:
//   Q8_0: d (half), 32 x int8 q; weight = d * q.
//   Q4_0: d (half), 16 bytes; byte i holds weight i in its low nibble and
//         weight i + 16 in its high nibble; weight = d * (nibble - 8).
// Q4_K, Q5_K and Q6_K are llama.cpp's K-quants, in its super-blocks of 256
// weights (kquant.h): Q4_K and Q6_K packed on x86, the rest as stored. Q2_K
// and Q3_K are read (from GGUF files) and computed, but not written. Free of
// LibTorch, so the kernels build and are tested on their own (cross-compiled
// for ARM too).
#include <cstdint>
#include <optional>
#include <string>

namespace splitspec {

enum class WType : uint8_t { F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K };
constexpr int kWTypes = 10;
constexpr int64_t kQBlock = 32;  // weights per Q8_0 / Q4_0 block
constexpr int64_t kSuperBlock = 256;  // weights per K-quant super-block

const char* wtype_name(WType t);  // "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q2_k", "q3_k"
// Accepts those names in any case; nullopt otherwise.
std::optional<WType> parse_wtype(const std::string& name);
// parse_wtype, also taking llama.cpp's mix names q4_k_m and q5_k_m (for
// q4_k and q5_k: tensor_type gives such a model's per-tensor types), or a
// splitspec::Error listing the names: the types a model is converted to,
// so not q2_k or q3_k (is_writable).
WType parse_weight_type(const std::string& name);
// The 32-weight block types, which the kernels read packed.
constexpr bool is_quantized(WType t) { return t == WType::Q8_0 || t == WType::Q4_0; }
constexpr bool is_kquant(WType t) {
  return t == WType::Q4_K || t == WType::Q5_K || t == WType::Q6_K || t == WType::Q2_K || t == WType::Q3_K;
}
// The K-quants with a quantizer; Q2_K and Q3_K are never written.
constexpr bool is_writable(WType t) { return t != WType::Q2_K && t != WType::Q3_K; }
// Stored in blocks with their own scales (rows of bytes in a safetensors file).
constexpr bool is_block_type(WType t) { return is_quantized(t) || is_kquant(t); }
// Bytes per K-quant super-block of 256 weights.
constexpr int64_t superblock_bytes(WType t) {
  return t == WType::Q4_K ? 144 : t == WType::Q5_K ? 176 : t == WType::Q2_K ? 84 : t == WType::Q3_K ? 110 : 210;
}
// Bytes per 32 weights (Q8_0 34, Q4_0 18, F16 64, F32 128).
constexpr int64_t block_bytes(WType t) {
  return t == WType::F32 ? 4 * kQBlock : t == WType::Q8_0 ? 2 + kQBlock : t == WType::Q4_0 ? 2 + kQBlock / 2 : 2 * kQBlock;
}
// Bytes of one row of `cols` weights; quantized types need cols % 32 == 0,
// K-quants cols % 256 == 0.
constexpr int64_t row_bytes(WType t, int64_t cols) {
  return is_kquant(t)      ? cols / kSuperBlock * superblock_bytes(t)
         : is_quantized(t) ? cols / kQBlock * block_bytes(t)
                           : cols * (block_bytes(t) / kQBlock);
}
// The weights a row's length must be a multiple of (1 for float types).
constexpr int64_t block_weights(WType t) { return is_kquant(t) ? kSuperBlock : is_quantized(t) ? kQBlock : 1; }

// Rows per group of a packed quantized matrix (below).
constexpr int64_t kPackRows = 16;

// The types the kernels read packed, so a model copies them at load: Q8_0
// and Q4_0 everywhere, and Q4_K and Q6_K on x86, whose kernels compute eight
// rows in the lanes of one register (kquant.h has that layout; NEON reads
// K-quants as stored).
constexpr bool stored_packed(WType t) {
#if defined(__x86_64__)
  if (t == WType::Q4_K || t == WType::Q6_K) return true;
#endif
  return is_quantized(t);
}

// A matrix of `rows` x `cols` weights of type `type`. Does not own `data`.
// Plain: rows back to back, row_bytes(type, cols) apart (the file layout).
// Packed (stored_packed types only): the same bytes regrouped for the
// kernels; K-quants as kquant.h says. For Q8_0 and Q4_0, each group of 16
// rows holds, block by block, the 16 rows' scales, then
// their quants in 4-byte pieces: piece k of every row in turn (row 0's bytes
// 4k..4k+3, row 1's, ...), so one 64-byte load gives 16 rows' next four
// bytes. Rows past the last whole group follow, plain. quant.h converts.
struct MatrixRef {
  WType type = WType::F32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  bool packed = false;
  // Row r of a plain matrix (or of a packed one's plain tail).
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes(type, cols); }
  int64_t bytes() const { return rows * row_bytes(type, cols); }
};

// IEEE half and bfloat16 to and from float. Widening is exact; narrowing
// rounds to nearest even (NaN stays NaN).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

}  // namespace splitspec

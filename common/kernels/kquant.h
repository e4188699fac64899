#pragma once
// llama.cpp's K-quants, read as its files store them: super-blocks of 256
// weights with 6- or 8-bit sub-block scales under a half-precision scale.
//   Q4_K (144 bytes): d, dmin (halves), 12 bytes of eight 6-bit scales and
//     mins, 128 bytes of 4-bit quants; w = d * sc * q - dmin * m per 32.
//   Q5_K (176 bytes): as Q4_K, with a fifth bit per weight (32 bytes).
//   Q6_K (210 bytes): 128 bytes of low 4 bits, 64 of high 2 bits, sixteen
//     int8 scales, d; w = d * sc * (q - 32) per 16.
//   Q2_K (84 bytes): sixteen bytes of a 4-bit scale and a 4-bit min, 64
//     bytes of 2-bit quants, d, dmin; w = d * sc * q - dmin * m per 16.
//   Q3_K (110 bytes): 32 bytes of high bits, 64 of low 2 bits, twelve bytes
//     of sixteen 6-bit scales, d; w = d * (sc - 32) * (q - 4 unless the
//     high bit is set) per 16.
//   IQ4_XS (136 bytes): d, a 16-bit word of scale high bits, four bytes of
//     scale low nibbles, 128 bytes of 4-bit indices into kIq4Values; per 32,
//     w = d * (sc - 32) * value (iq4xs_scale has the layout); read, not
//     written.
// Q2_K and Q3_K run every body but AVX-512's own (AVX-512 machines run the
// avx2 one). All take activations quantized as llama.cpp's Q8_K: per row and
// super-block, d = max / -127 (max the signed value of largest magnitude),
// q = round-to-even(x * -127 / max) capped at 127, and each 16 q's sum.
// Free of LibTorch; built with -ffp-contract=off.
#include <cstdint>
#include <vector>

#include "common/kernels/weight_type.h"

namespace splitspec {

// Where a super-block's half-precision d lies; dmin follows it in the types
// with mins (Q2_K, Q4_K, Q5_K).
constexpr int64_t superblock_d_offset(WType t) {
  return t == WType::Q6_K ? 208 : t == WType::Q3_K ? 108 : t == WType::Q2_K ? 80 : 0;
}
constexpr bool superblock_has_mins(WType t) { return t == WType::Q4_K || t == WType::Q5_K || t == WType::Q2_K; }
// Q3_K's scale j (0..15) from its twelve scale bytes s: the low 4 bits in
// bytes 0-7 (low nibbles for 0-7, high for 8-15), the top 2 in bytes 8-11
// (byte 8 + j % 4, bits 2(j / 4)); less 32.
constexpr int q3k_scale(const uint8_t* s, int j) {
  return ((j < 8 ? s[j] & 0xF : s[j - 8] >> 4) | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

// IQ4_XS's scale s (0..7), less 32: the low 4 bits in byte 4 + s / 2 (low
// nibble for even s), the top 2 in the 16-bit word at byte 2 (bits 2s).
constexpr int iq4xs_scale(const uint8_t* b, int s) {
  return (((b[4 + s / 2] >> (4 * (s % 2))) & 0xF) | (((b[2 + s / 4] >> (2 * (s % 4))) & 3) << 4)) - 32;
}

// One super-block as 256 floats, exactly as llama.cpp's dequantize_row_*.
void dequantize_superblock(WType t, const uint8_t* block, float* y);
// 256 floats as one super-block of type t (Q2_K .. Q6_K), in llama.cpp's
// layout: sub-block scales (and, for Q2_K/Q4_K/Q5_K, mins) from each
// sub-block's range, themselves quantized against the super-block's half
// scales, then every weight rounded to nearest against its sub-block's
// stored scale. IQ4_XS is refused.
// A simpler search than llama-quantize's iterative one (its files are read
// as stored); deterministic.
void quantize_superblock(WType t, const float* x, uint8_t* block);
// Whether the super-block's half-precision scales are finite.
bool superblock_scales_finite(WType t, const uint8_t* block);

struct Q8KRows {
  int64_t rows = 0, cols = 0, blocks = 0;
  std::vector<int8_t> q;       // [rows][cols]
  std::vector<float> d;        // [rows][blocks]
  std::vector<int16_t> bsums;  // [rows][blocks][16]
  // -32 x bsums: where the AVX-512 body's Q6_K sub-block sums start
  // (kquant_packed_x86.h), read long after they are written, so a load
  // never waits on the store that wrote it.
  std::vector<int32_t> q6k_starts;  // [rows][blocks][16]
};
// One super-block of 256 activations: its quants, scale and 16-sums.
using Q8KSuperblock = void (*)(const float* v, int8_t* q, float& d, int16_t* sums);
void quantize_q8k_superblock(const float* v, int8_t* q, float& d, int16_t* sums);
// Every super-block of x by `one` (a vector body's form, kquant_avx2.cpp,
// gives the same bits), then q6k_starts.
void quantize_q8k(const float* x, int64_t rows, int64_t cols, Q8KRows& out,
                  Q8KSuperblock one = quantize_q8k_superblock);

// One super-block's exact integer sums against the same super-block of n
// activation rows (inputs xq[i], their 16-sums bsums[i]), into out[i]: over
// its sub-blocks, scale x (quant . input), the quants as weights (Q6_K's
// minus 32). The block is decoded once for all n. Any order gives the same
// integers, so a vector body may compute them its own way.
using SuperblockSums = void (*)(WType t, const uint8_t* block, int n, const int8_t* const* xq,
                                const int16_t* const* bsums, int32_t* out);
void superblock_sums(WType t, const uint8_t* block, int n, const int8_t* const* xq, const int16_t* const* bsums,
                     int32_t* out);

// Packed Q4_K and Q6_K matrices (MatrixRef::packed; stored_packed says where),
// each group of kKPackRows rows holds, super-block by super-block, one
// block of the sixteen rows' bytes regrouped so that a 64-byte load gives
// every row's next four bytes (one row per 32-bit lane of a 512-bit vector,
// rows 0-7 in the low half), with the rows' scales side by side
// (kquant_pack.cpp has the map). So a 512-bit body reads one stream, and a
// 256-bit one reads rows 8h .. 8h + 7 at 32h bytes into each 64, 16h into
// the d's and 8h into each of Q6_K's scale rows. Rows past the last whole
// group follow, plain.
constexpr int64_t kKPackRows = 16;
// Where a packed super-block's fields start, in bytes from its first (each
// field the group's rows side by side, its 4-byte pieces every row's in
// turn): Q4_K's d at 0, then dmin, the scale words and the quants; Q6_K's
// quants (ql, then qh) and the rest (scales, then d), whose order
// alternates with the super-block b (kquant_pack.cpp says why).
constexpr int64_t kq4_dmin = 2 * kKPackRows, kq4_scales = 4 * kKPackRows, kq4_quants = 16 * kKPackRows;
constexpr int64_t kq6_quants(int64_t b) { return b % 2 == 0 ? 0 : 18 * kKPackRows; }
constexpr int64_t kq6_rest(int64_t b) { return b % 2 == 0 ? 192 * kKPackRows : 0; }
constexpr int64_t kq6_qh = 128 * kKPackRows, kq6_d = 16 * kKPackRows;
// Regroups a plain Q4_K or Q6_K matrix's whole groups in place (pack) or
// back (unpack); `scratch` grows to one group's bytes.
void kquant_regroup_rows(WType type, uint8_t* data, int64_t rows, int64_t cols, std::vector<uint8_t>& scratch,
                         bool pack);
// One packed group (kKPackRows rows at `group`) as plain rows into `out`.
void kquant_unpack_group(WType type, const uint8_t* group, int64_t cols, uint8_t* out);
// Super-block b of row r, plain or packed, in the file's layout.
void read_superblock(const MatrixRef& m, int64_t r, int64_t b, uint8_t* out);

// Activation rows one kquant_dots call takes.
constexpr int kMaxDotRows = 8;

// Row `row` (plain bytes of `cols` weights) times rows j0 .. j0 + n - 1 of
// `x` (n <= kMaxDotRows), into out[i * stride]. Each output, super-block by
// super-block in order: its integer sum (and, for Q4_K/Q5_K, the integer sum
// of min x the inputs' 16-sums), each added with one fused multiply-add by
// d_w * d_x (and -dmin_w * d_x). An output does not depend on n or j0.
void kquant_dots(WType t, const uint8_t* row, int64_t cols, const Q8KRows& x, int64_t j0, int n, float* out,
                 int64_t stride, SuperblockSums sums = superblock_sums);

}  // namespace splitspec

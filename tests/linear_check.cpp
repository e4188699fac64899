// Every linear() body this CPU can run against linear_reference(), bit for
// bit, at every weight type, thread count and batch size, and each row of a
// batch against the same row alone (batch invariance), and linear_many()
// against linear() matrix by matrix. Free of LibTorch and
// GoogleTest, so the same program runs cross-compiled for AArch64 under QEMU
// (scripts/test_arm_kernels.sh): the NEON body is held to the same bits.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/kernels/kquant.h"
#include "common/kernels/linear.h"
#include "common/kernels/parallel.h"
#include "common/kernels/quant.h"

using namespace splitspec;

namespace {

int failures = 0, checks = 0;

void expect_same(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ++checks;
  if (got.size() == want.size() && std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0) return;
  ++failures;
  size_t i = 0;
  while (i < got.size() && std::memcmp(&got[i], &want[i], sizeof(float)) == 0) ++i;
  if (failures <= 20)
    std::printf("MISMATCH %s at %zu: %.9g vs %.9g\n", what.c_str(), i, i < got.size() ? got[i] : 0.0f,
                i < want.size() ? want[i] : 0.0f);
}

// Random super-block bytes with finite, modest half-precision scales.
void random_superblocks(WType type, std::mt19937& rng, std::vector<uint8_t>& w) {
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  const int64_t sb = superblock_bytes(type);
  std::uniform_real_distribution<float> scale(0.0005f, 0.01f);
  for (size_t at = 0; at < w.size(); at += static_cast<size_t>(sb)) {
    const uint16_t d = float_to_half(scale(rng)), dmin = float_to_half(scale(rng));
    const size_t d_at = static_cast<size_t>(superblock_d_offset(type));
    std::memcpy(&w[at + d_at], &d, 2);
    if (superblock_has_mins(type)) std::memcpy(&w[at + d_at + 2], &dmin, 2);
  }
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int isas = 0;
  for (int i = 0; i < kernels::kIsas; ++i) {
    const auto isa = static_cast<kernels::Isa>(i);
    if (!kernels::isa_available(isa)) continue;
    ++isas;
    kernels::use_isa(isa);
    for (int t = 0; t < kWTypes; ++t) {
      const auto type = static_cast<WType>(t);
      // The widths of the models people download whose rows are not whole
      // super-blocks (SmolLM2-135M 576, Gemma 3 270M 640, Qwen2.5-0.5B 896,
      // SmolLM2-360M 960) among them.
      std::vector<int64_t> widths = {32, 64, 96, 256, 576, 640, 704, 896, 960, 1728};
      if (!is_block_type(type)) widths.insert(widths.end(), {1, 7, 9, 100, 1000});
      if (is_kquant(type)) widths = {256, 512, 1792};
      for (int64_t in : widths)
        for (int64_t out : {1, 5, 13, 50, 64}) {
          // Every batch size 1-64 at the block types' model widths (a verify
          // forward's k tokens, a tree's nodes), 1-9 elsewhere.
          const bool model_width = in == 576 || in == 640 || in == 896 || in == 960 || (is_kquant(type) && in == 512);
          const bool wide = is_block_type(type) && model_width && out == 50;
          const int64_t rows = wide ? 64 : 9;
          std::vector<float> wf(out * in), x(rows * in);
          for (auto& v : wf) v = normal(rng) * 0.1f;
          for (auto& v : x) v = normal(rng);
          std::vector<uint8_t> w(out * row_bytes(type, in));
          if (is_writable(type))
            quantize_rows(type, wf.data(), out, in, w.data());
          else
            random_superblocks(type, rng, w);  // IQ4_XS: nothing here writes it
          const MatrixRef plain{type, w.data(), out, in};
          std::vector<float> want(rows * out);
          kernels::linear_reference(x.data(), rows, plain, want.data());
          // Packed types run packed, as models hold them; the reference
          // reads the plain bytes, and the packed ones too.
          std::vector<uint8_t> scratch;
          if (stored_packed(type)) pack_rows(type, w.data(), out, in, scratch);
          const MatrixRef m{type, w.data(), out, in, stored_packed(type)};
          const std::string what = std::string(kernels::isa_name(isa)) + " " + wtype_name(type) + " " +
                                   std::to_string(in) + "x" + std::to_string(out);
          if (m.packed) {
            std::vector<float> again(rows * out);
            kernels::linear_reference(x.data(), rows, m, again.data());
            expect_same(again, want, what + " reference, packed");
          }
          for (int threads : {1, 2}) {
            kernels::set_threads(threads);
            for (int64_t n = 1; n <= rows; ++n) {
              std::vector<float> got(n * out);
              kernels::linear(x.data(), n, m, got.data());
              const std::vector<float> want_n(want.begin(), want.begin() + n * out);
              expect_same(got, want_n, what + " rows " + std::to_string(n) + " threads " + std::to_string(threads));
              // Twice in one region (linear_many): each as alone.
              std::vector<float> first(n * out), second(n * out);
              const kernels::LinearTo both[2] = {{m, first.data()}, {m, second.data()}};
              kernels::linear_many(x.data(), n, both, 2);
              expect_same(first, want_n, what + " first of two, rows " + std::to_string(n));
              expect_same(second, want_n, what + " second of two, rows " + std::to_string(n));
            }
            // Row 6 alone, from its own buffer, is row 6 of the batch.
            std::vector<float> one(out);
            std::vector<float> x6(x.begin() + 6 * in, x.begin() + 7 * in);
            kernels::linear(x6.data(), 1, m, one.data());
            expect_same(one, std::vector<float>(want.begin() + 6 * out, want.begin() + 7 * out), what + " row 6 alone");
          }
        }
    }
  }
  // Activation blocks at the quantizer's edges, every ISA's against the
  // reference: all zeros (a scale of 0), halves that round to even (amax 127
  // makes the scale 1), subnormals, and a block near the float range's top;
  // 9 rows of 3 blocks, so a 16-block pass ends part way through a row.
  for (int i = 0; i < kernels::kIsas; ++i) {
    const auto isa = static_cast<kernels::Isa>(i);
    if (!kernels::isa_available(isa)) continue;
    kernels::use_isa(isa);
    constexpr int64_t in = 96, out = 50, rows = 9;
    std::vector<float> x(rows * in);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < in; ++c) {
        const int64_t b = (r + c / kQBlock) % 4, k = c % kQBlock;
        float& v = x[r * in + c];
        if (b == 0) v = 0.0f;
        if (b == 1) v = k == 0 ? 127.0f : (k % 2 ? -1.0f : 1.0f) * (static_cast<float>(k) - 0.5f);
        if (b == 2) v = (k % 3 ? 1.0f : -1.0f) * 1e-40f * static_cast<float>(k + 1);
        if (b == 3) v = (k % 2 ? -3e38f : 2e38f) / static_cast<float>(k + 1);
      }
    for (WType type : {WType::Q8_0, WType::Q4_0, WType::Q4_1}) {
      std::vector<float> wf(out * in);
      for (auto& v : wf) v = normal(rng) * 0.1f;
      std::vector<uint8_t> w(out * row_bytes(type, in)), scratch;
      quantize_rows(type, wf.data(), out, in, w.data());
      std::vector<float> want(rows * out), got(rows * out);
      kernels::linear_reference(x.data(), rows, MatrixRef{type, w.data(), out, in}, want.data());
      pack_rows(type, w.data(), out, in, scratch);
      kernels::linear(x.data(), rows, MatrixRef{type, w.data(), out, in, true}, got.data());
      expect_same(got, want, std::string(kernels::isa_name(isa)) + " " + wtype_name(type) + " edge activations");
    }
  }
  // A Q4_K_M layer's matrices over one input (linear_many): Q4_K and Q6_K
  // share their activations' form, Q8_0 takes its own; rows not a whole
  // group (13). Each as linear() gives it alone.
  for (int i = 0; i < kernels::kIsas; ++i) {
    const auto isa = static_cast<kernels::Isa>(i);
    if (!kernels::isa_available(isa)) continue;
    kernels::use_isa(isa);
    constexpr int64_t in = 512, rows = 9;
    const WType types[3] = {WType::Q4_K, WType::Q6_K, WType::Q8_0};
    const int64_t outs[3] = {64, 13, 50};
    std::vector<std::vector<uint8_t>> bytes(3);
    std::vector<MatrixRef> ms;
    for (int k = 0; k < 3; ++k) {
      std::vector<float> wf(outs[k] * in);
      for (auto& v : wf) v = normal(rng) * 0.1f;
      bytes[k].resize(outs[k] * row_bytes(types[k], in));
      quantize_rows(types[k], wf.data(), outs[k], in, bytes[k].data());
      std::vector<uint8_t> scratch;
      if (stored_packed(types[k])) pack_rows(types[k], bytes[k].data(), outs[k], in, scratch);
      ms.push_back({types[k], bytes[k].data(), outs[k], in, stored_packed(types[k])});
    }
    std::vector<float> x(rows * in);
    for (auto& v : x) v = normal(rng);
    for (int threads : {1, 2}) {
      kernels::set_threads(threads);
      for (int64_t n = 1; n <= rows; ++n) {
        std::vector<std::vector<float>> alone(3), together(3);
        kernels::LinearTo to[3];
        for (int k = 0; k < 3; ++k) {
          alone[k].resize(n * outs[k]);
          together[k].resize(n * outs[k]);
          kernels::linear(x.data(), n, ms[k], alone[k].data());
          to[k] = {ms[k], together[k].data()};
        }
        kernels::linear_many(x.data(), n, to, 3);
        for (int k = 0; k < 3; ++k)
          expect_same(together[k], alone[k],
                      std::string(kernels::isa_name(isa)) + " linear_many " + wtype_name(types[k]) + " rows " +
                          std::to_string(n) + " threads " + std::to_string(threads));
      }
    }
  }
  std::printf("linear_check: %d instruction sets, %d checks, %d mismatches\n", isas, checks, failures);
  return failures == 0 ? 0 : 1;
}

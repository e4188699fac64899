// Built with -ffp-contract=off: every multiply-add is fused, or not, exactly
// as written (linear.h).
#include "common/kernels/linear.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/kernels/kquant.h"
#include "common/kernels/linear_isa.h"
#include "common/kernels/parallel.h"
#include "common/util/error.h"

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace splitspec::kernels {

namespace {

// Each thread's own count, as OpenMP's is: a pre-drafting worker that runs
// on one thread must not change the main thread's. Threads that never set
// one use the first count set in the process.
std::atomic<int> g_default_threads{0};
std::atomic<bool> g_default_timed{false};
thread_local int t_threads = 0;
thread_local bool t_timed = false;

bool cpu_has(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
#if defined(__x86_64__)
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return cpu_has(Isa::kAvx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
#if defined(__aarch64__)
    case Isa::kNeon: return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
    default: return false;
  }
}

Isa best_isa() {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kNeon})
    if (cpu_has(isa)) return isa;
  return Isa::kScalar;
}

// SPLITSPEC_KERNELS names a path to use instead of the best (one this CPU
// has), so tests and comparisons can run the others.
Isa initial_isa() {
  const char* force = std::getenv("SPLITSPEC_KERNELS");
  if (force)
    for (int i = 0; i < kIsas; ++i)
      if (std::string(force) == isa_name(static_cast<Isa>(i)) && cpu_has(static_cast<Isa>(i)))
        return static_cast<Isa>(i);
  return best_isa();
}

std::atomic<Isa>& current() {
  static std::atomic<Isa> isa{initial_isa()};
  return isa;
}

// The exact order linear.h defines, for the lanes' final sum.
float hsum8(const float* a) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); }

float weight_at(const MatrixRef& w, const uint8_t* row, int64_t i) {
  uint16_t h;
  switch (w.type) {
    case WType::F32: {
      float f;
      std::memcpy(&f, row + 4 * i, 4);
      return f;
    }
    case WType::F16: std::memcpy(&h, row + 2 * i, 2); return half_to_float(h);
    default: std::memcpy(&h, row + 2 * i, 2); return bf16_to_float(h);
  }
}

float float_dot(const MatrixRef& w, const uint8_t* row, const float* x) {
  float acc[8] = {};
  for (int64_t i0 = 0; i0 < w.cols; i0 += 8)
    for (int l = 0; l < 8; ++l) {
      const int64_t i = i0 + l;
      const float wv = i < w.cols ? weight_at(w, row, i) : 0.0f, xv = i < w.cols ? x[i] : 0.0f;
      acc[l] = std::fma(wv, xv, acc[l]);
    }
  return hsum8(acc);
}

float quant_dot(const MatrixRef& w, int64_t r, const QuantizedRows& qx, int64_t j) {
  float acc = 0.0f;
  const int8_t* xq = qx.q.data() + j * qx.cols;
  const float* xd = qx.d.data() + j * qx.blocks;
  const float* xs = qx.s.data() + j * qx.blocks;
  const bool min = block_has_min(w.type);
  uint8_t blk[2 + kQBlock];
  for (int64_t b = 0; b < qx.blocks; ++b) {
    read_block(w, r, b, blk);
    int8_t q[kQBlock];
    block_quants(w.type, blk, q);
    const int8_t* xb = xq + b * kQBlock;
    int32_t s = 0;
    for (int i = 0; i < kQBlock; ++i) s += q[i] * xb[i];
    acc = std::fma(static_cast<float>(s), block_d(blk) * xd[b], acc);
    if (min) acc = std::fma(block_m(blk), xs[b], acc);
  }
  return acc;
}

void quantize_for(Isa isa, const float* x, int64_t n, int64_t cols, QuantizedRows& qx) {
  switch (isa) {
#if defined(__x86_64__)
    case Isa::kAvx2: avx2::quantize_activations(x, n, cols, qx); return;
    case Isa::kAvx512: avx512::quantize_activations(x, n, cols, qx); return;
#endif
#if defined(__aarch64__)
    case Isa::kNeon: neon::quantize_activations(x, n, cols, qx); return;
#endif
    default: quantize_activations(x, n, cols, qx); return;
  }
}

void quantize_q8k_for(Isa isa, const float* x, int64_t n, int64_t cols, Q8KRows& qk) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx2 || isa == Isa::kAvx512) return quantize_q8k(x, n, cols, qk, avx2::quantize_q8k_superblock);
#endif
  (void)isa;
  quantize_q8k(x, n, cols, qk);
}

void check(const MatrixRef& w) {
  if (w.cols % block_weights(w.type) != 0)
    throw Error(std::string("linear: ") + wtype_name(w.type) + " weights need a multiple of " +
                std::to_string(block_weights(w.type)) + " columns, not " + std::to_string(w.cols));
}

// Rows [r0, r1) of plain K-quant rows starting at `first` (row r0's bytes
// at first + (r - r0) row lengths), with kquant_dots and the body's sums.
void kquant_plain_rows(const MatrixRef& w, const uint8_t* first, int64_t r0, int64_t r1, const Q8KRows& qk, float* y,
                       Isa isa) {
  SuperblockSums sums = superblock_sums;
#if defined(__aarch64__)
  if (isa == Isa::kNeon) sums = neon::superblock_sums;
#endif
  const int64_t rb = row_bytes(w.type, w.cols);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < qk.rows; j += kMaxDotRows)
      kquant_dots(w.type, first + (r - r0) * rb, w.cols, qk, j,
                  static_cast<int>(std::min<int64_t>(kMaxDotRows, qk.rows - j)), y + j * w.rows + r, w.rows, sums);
}

// K-quant weights against Q8_K activations (qk, quantized by the caller),
// rows [r0, r1) with r0 a multiple of kPackRows: each weight row decoded
// once per super-block for up to kMaxDotRows activation rows (packed rows
// by the x86 bodies, AVX-512 sixteen at a time and AVX2 eight; other
// bodies read them unpacked a group at a time); every output the same whatever rows or threads share
// the call (kquant_dots).
void kquant_range(const MatrixRef& w, int64_t r0, int64_t r1, const Q8KRows& qk, float* y, Isa isa) {
  // Ranges are whole groups of 16 rows, so they split no packed group.
  static_assert(kPackRows % kKPackRows == 0);
  const int64_t grouped = w.packed ? w.rows / kKPackRows * kKPackRows : 0;
  if (r0 < grouped) {
    const int64_t end = std::min(r1, grouped);
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) {
      avx512::kquant_packed_rows(w, r0, end, qk, y);
      r0 = end;
    } else if (isa == Isa::kAvx2) {
      avx2::kquant_packed_rows(w, r0, end, qk, y);
      r0 = end;
    }
#endif
    thread_local std::vector<uint8_t> plain;
    plain.resize(static_cast<size_t>(kKPackRows * row_bytes(w.type, w.cols)));
    for (; r0 < end; r0 += kKPackRows) {
      kquant_unpack_group(w.type, w.row(r0), w.cols, plain.data());
      kquant_plain_rows(w, plain.data(), r0, r0 + kKPackRows, qk, y, isa);
    }
  }
  if (r0 >= r1) return;
#if defined(__x86_64__)
  if (isa == Isa::kAvx512) return avx512::kquant_rows(w, r0, r1, qk, y);
  if (isa == Isa::kAvx2) return avx2::kquant_rows(w, r0, r1, qk, y);
#endif
  kquant_plain_rows(w, w.row(r0), r0, r1, qk, y, isa);
}

// A packed 32-weight-block or float matrix's rows [r0, r1): the body's
// blocks, and the plain tail below the last whole group by the reference.
void body_range(const LinearCall& call, int64_t r0, int64_t r1, Isa isa) {
  const bool quantized = is_quantized(call.w.type);
  if (quantized && (!call.w.packed || isa == Isa::kScalar)) return reference_rows(call, r0, r1);
  const int64_t grouped = quantized ? call.w.rows / kPackRows * kPackRows : call.w.rows;
  const int64_t end = std::min(r1, grouped);
  if (r0 < end) {
    switch (isa) {
#if defined(__x86_64__)
      case Isa::kAvx512: avx512::linear_rows(call, r0, end); break;
      case Isa::kAvx2: avx2::linear_rows(call, r0, end); break;
#endif
#if defined(__aarch64__)
      case Isa::kNeon: neon::linear_rows(call, r0, end); break;
#endif
      default: reference_rows(call, r0, end); break;
    }
  }
  if (end < r1) reference_rows(call, std::max(r0, end), r1);
}

// One matrix of a parallel region: its rows in blocks of `block` (each
// range handed to it starts on one), and how many blocks a chunk takes at
// least, to amortise handing them out.
struct Part {
  LinearCall call;
  const Q8KRows* qk;  // the activations for K-quant weights
  int64_t block, min_blocks;
  int64_t blocks() const { return (call.w.rows + block - 1) / block; }
};

Part part_for(const LinearCall& call, const Q8KRows* qk) {
  const MatrixRef& w = call.w;
  if (is_kquant(w.type) || (is_quantized(w.type) && !w.packed)) return {call, qk, kPackRows, 1};
  // Whole pairs of groups of 16 rows for packed matrices (a pair's blocks
  // lie in one stream), and ranges of 12 weight rows otherwise (a multiple
  // of every float body's row blocking).
  const int64_t block = is_quantized(w.type) ? kPairRows : 12;
  const int64_t work = std::max<int64_t>(1, row_bytes(w.type, w.cols) * call.n * block);
  return {call, qk, block, std::max<int64_t>(1, (int64_t{1} << 17) / work)};
}

// Every part's rows in one parallel region (a chunk may span parts); each
// output is computed by its matrix's own body as linear() alone would.
void run_parts(const Part* parts, int count, Isa isa) {
  int64_t total = 0, min_blocks = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < count; ++i) {
    total += parts[i].blocks();
    min_blocks = std::min(min_blocks, parts[i].min_blocks);
  }
  parallel_blocks(total, 1, min_blocks, [&](int64_t b0, int64_t b1) {
    int64_t base = 0;
    for (int i = 0; i < count && b0 < b1; ++i) {
      const Part& p = parts[i];
      const int64_t blocks = p.blocks();
      if (b0 < base + blocks) {
        const int64_t e = std::min(b1, base + blocks);
        const int64_t r0 = (b0 - base) * p.block, r1 = std::min(p.call.w.rows, (e - base) * p.block);
        if (p.qk)
          kquant_range(p.call.w, r0, r1, *p.qk, p.call.y, isa);
        else
          body_range(p.call, r0, r1, isa);
        b0 = e;
      }
      base += blocks;
    }
  });
}

}  // namespace

void set_threads(int n, bool timed) {
  t_threads = std::max(1, n);
  t_timed = timed;
  int unset = 0;
  if (g_default_threads.compare_exchange_strong(unset, t_threads)) g_default_timed.store(timed);
}

int threads() {
  if (t_threads > 0) return t_threads;
  const int d = g_default_threads.load(std::memory_order_relaxed);
  return d > 0 ? d : 1;
}

bool threads_timed() { return t_threads > 0 ? t_timed : g_default_timed.load(std::memory_order_relaxed); }

int threads_for(int64_t macs) {
  return static_cast<int>(std::clamp<int64_t>(macs / kMacsPerThread, 1, threads()));
}

ScopedThreads::ScopedThreads(int n) : saved_(t_threads), saved_timed_(t_timed) {
  t_timed = threads_timed();
  t_threads = std::max(1, n);
}

ScopedThreads::~ScopedThreads() {
  t_threads = saved_;
  t_timed = saved_timed_;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kNeon: return "neon";
  }
  return "?";
}

bool isa_available(Isa isa) { return cpu_has(isa); }
Isa isa_in_use() { return current().load(std::memory_order_relaxed); }

void use_isa(Isa isa) {
  if (!cpu_has(isa)) throw Error(std::string("kernels: this CPU cannot run the ") + isa_name(isa) + " path");
  current().store(isa);
}

void reference_rows(const LinearCall& c, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t j = 0; j < c.n; ++j)
      c.y[j * c.w.rows + r] =
          is_quantized(c.w.type) ? quant_dot(c.w, r, *c.qx, j) : float_dot(c.w, c.w.row(r), c.x + j * c.w.cols);
  }
}

void linear_reference(const float* x, int64_t n, const MatrixRef& w, float* y) {
  check(w);
  if (is_kquant(w.type)) {
    Q8KRows qk;
    quantize_q8k(x, n, w.cols, qk);
    kquant_range(w, 0, w.rows, qk, y, Isa::kScalar);
    return;
  }
  QuantizedRows qx;
  if (is_quantized(w.type)) quantize_activations(x, n, w.cols, qx);
  reference_rows({x, n, w, y, &qx}, 0, w.rows);
}

void linear(const float* x, int64_t n, const MatrixRef& w, float* y) {
  const LinearTo one{w, y};
  linear_many(x, n, &one, 1);
}

void linear_many(const float* x, int64_t n, const LinearTo* outs, int count) {
  if (n == 0 || count == 0) return;
  for (int i = 0; i < count; ++i)
    if (outs[i].w.rows > 0) check(outs[i].w);
  const WType t = outs[0].w.type;
  // The activations are quantized once for every matrix that takes the
  // same form (Q8_K for the K-quants, quant.h's blocks for the others);
  // matrices of another form run as calls of their own.
  auto form = [](WType u) { return is_kquant(u) ? 2 : is_quantized(u) ? 1 : 0; };
  for (int i = 1; i < count; ++i)
    if (form(outs[i].w.type) != form(t) || outs[i].w.cols != outs[0].w.cols) {
      for (int j = 0; j < count; ++j) linear_many(x, n, outs + j, 1);
      return;
    }
  const Isa isa = isa_in_use();
  thread_local Q8KRows qk;
  thread_local QuantizedRows qx;
  if (form(t) == 2)
    quantize_q8k_for(isa, x, n, outs[0].w.cols, qk);
  else if (form(t) == 1)
    quantize_for(isa, x, n, outs[0].w.cols, qx);
  constexpr int kMost = 4;
  Part parts[kMost];
  for (int i0 = 0; i0 < count; i0 += kMost) {
    int m = 0;
    for (int i = i0; i < std::min(count, i0 + kMost); ++i)
      if (outs[i].w.rows > 0) parts[m++] = part_for({x, n, outs[i].w, outs[i].y, &qx}, form(t) == 2 ? &qk : nullptr);
    run_parts(parts, m, isa);
  }
}

}  // namespace splitspec::kernels

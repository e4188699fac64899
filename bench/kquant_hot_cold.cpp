// Where a k-token quantized product's time goes: nanoseconds a weight for
// 1, 5 and 8 activation rows with the weights in L2 (hot: what the core's
// decoding and products cost) and streamed from memory (cold: a matrix set
// larger than L3, as a forward reads a model). Where hot k rows cost more
// than cold 1 row, the products, not memory, set k rows' time; the gap
// between cold and hot at k rows is what memory adds on top
// (bench/results/k_token.md, "Hot and cold").
//   build/bin/kquant_hot_cold [q4_k|q6_k|q4_0|q8_0] [threads]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/kernels/linear.h"
#include "common/kernels/parallel.h"
#include "common/kernels/quant.h"

using namespace splitspec;
using namespace splitspec::kernels;

namespace {

constexpr int64_t kCols = 2048;  // a 1B-class model's hidden width

// On a cache line, as a model's copies are (WeightBytes).
WeightBytes packed_matrix(WType t, int64_t rows, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> wf(rows * kCols);
  for (auto& v : wf) v = normal(rng) * 0.1f;
  WeightBytes w(rows * row_bytes(t, kCols));
  std::vector<uint8_t> scratch;
  quantize_rows(t, wf.data(), rows, kCols, w.data());
  pack_rows(t, w.data(), rows, kCols, scratch);
  return w;
}

template <class F>
double median_ns_per_weight(F&& run, double weights) {
  std::vector<double> ns;
  for (int rep = 0; rep < 7; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / weights);
  }
  std::nth_element(ns.begin(), ns.begin() + 3, ns.end());
  return ns[3];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string type = argc > 1 ? argv[1] : "q4_k";
  const WType t = parse_weight_type(type);
  if (t != WType::Q4_K && t != WType::Q6_K && t != WType::Q4_0 && t != WType::Q8_0) {
    std::fprintf(stderr, "kquant_hot_cold: q4_k, q6_k, q4_0 or q8_0, not %s\n", type.c_str());
    return 1;
  }
  set_threads(argc > 2 ? std::stoi(argv[2]) : 1);
  std::mt19937 rng(1);
  // 0.55-0.9 MB: fits a 1 MB L2 (Q8_0's 512 rows would not).
  const int64_t hot_rows = row_bytes(t, kCols) * 512 <= (900 << 10) ? 512 : 256;
  const int64_t cold_rows = 8192, cold_count = 32;  // 0.3-0.4 GB
  const auto hot = packed_matrix(t, hot_rows, rng);
  std::vector<WeightBytes> cold;
  for (int i = 0; i < cold_count; ++i) cold.push_back(packed_matrix(t, cold_rows, rng));
  std::normal_distribution<float> normal;
  std::vector<float> x(8 * kCols), y(8 * cold_rows);
  for (auto& v : x) v = normal(rng);
  const int hot_calls = 2000;
  std::printf("%s, %s, ns a weight (ms for 1.236 G weights, the 1B-class model's)\n", wtype_name(t), isa_name(isa_in_use()));
  std::printf("rows  hot              cold             cold/hot\n");
  for (int n : {1, 5, 8}) {
    const MatrixRef h{t, hot.data(), hot_rows, kCols, true};
    const double hot_ns = median_ns_per_weight(
        [&] {
          for (int c = 0; c < hot_calls; ++c) linear(x.data(), n, h, y.data());
        },
        static_cast<double>(hot_calls) * hot_rows * kCols);
    const double cold_ns = median_ns_per_weight(
        [&] {
          for (const auto& m : cold) linear(x.data(), n, MatrixRef{t, m.data(), cold_rows, kCols, true}, y.data());
        },
        static_cast<double>(cold_count) * cold_rows * kCols);
    std::printf("%4d  %.4f (%5.1f)  %.4f (%5.1f)  %.2f\n", n, hot_ns, hot_ns * 1236, cold_ns, cold_ns * 1236, cold_ns / hot_ns);
  }
}

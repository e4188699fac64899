#include "tests/reference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>

namespace splitspec::test {

std::vector<float> randn(int64_t n, uint64_t seed, float scale) {
  std::mt19937 engine(static_cast<std::mt19937::result_type>(seed));
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(engine);
  return v;
}

std::vector<float> reference_linear(const float* x, int64_t n, const float* w, int64_t out, int64_t in) {
  std::vector<float> y(static_cast<size_t>(n * out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0.0;
      for (int64_t k = 0; k < in; ++k) s += static_cast<double>(x[i * in + k]) * w[o * in + k];
      y[static_cast<size_t>(i * out + o)] = static_cast<float>(s);
    }
  return y;
}

std::vector<double> reference_softmax(const float* x, int64_t n, double temperature) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, static_cast<double>(x[i]));
  std::vector<double> p(static_cast<size_t>(n));
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    p[static_cast<size_t>(i)] = std::exp((x[i] - max) / temperature);
    total += p[static_cast<size_t>(i)];
  }
  for (double& v : p) v /= total;
  return p;
}

std::vector<float> reference_attention(const float* q, const float* k, const float* v, int64_t dim,
                                       const std::vector<int32_t>& slots, double scale) {
  std::vector<float> scores;
  for (int32_t s : slots) {
    double dot = 0.0;
    for (int64_t d = 0; d < dim; ++d) dot += static_cast<double>(q[d]) * k[s * dim + d];
    scores.push_back(static_cast<float>(dot * scale));
  }
  const std::vector<double> p = reference_softmax(scores.data(), static_cast<int64_t>(scores.size()));
  std::vector<float> out(static_cast<size_t>(dim));
  for (int64_t d = 0; d < dim; ++d) {
    double s = 0.0;
    for (size_t j = 0; j < slots.size(); ++j) s += p[j] * v[slots[j] * dim + d];
    out[static_cast<size_t>(d)] = static_cast<float>(s);
  }
  return out;
}

Rows concat(const std::vector<Rows>& parts) {
  int64_t rows = 0;
  for (const Rows& p : parts) rows += p.rows();
  Rows all(rows, parts.empty() ? 0 : parts[0].cols());
  int64_t at = 0;
  for (const Rows& p : parts) {
    if (p.cols() != all.cols()) {
      ADD_FAILURE() << "concat: a part of " << p.cols() << " columns among parts of " << all.cols();
      return all;
    }
    std::copy(p.data(), p.data() + p.size(), all.row(at));
    at += p.rows();
  }
  return all;
}

namespace {

// Every value of `a` against its counterpart in `b` by `fits`: the shapes,
// how many do not fit, the first of them and the largest difference.
::testing::AssertionResult compare(RowsView a, RowsView b, const std::function<bool(float, float)>& fits) {
  if (a.rows != b.rows || a.cols != b.cols)
    return ::testing::AssertionFailure() << "shapes differ: [" << a.rows << ", " << a.cols << "] and [" << b.rows
                                         << ", " << b.cols << "]";
  int64_t misfits = 0, first = -1;
  double largest = 0.0;
  for (int64_t i = 0; i < a.rows * a.cols; ++i) {
    if (fits(a.data[i], b.data[i])) continue;
    if (misfits++ == 0) first = i;
    const double d = std::abs(static_cast<double>(a.data[i]) - b.data[i]);
    if (!(d <= largest)) largest = d;
  }
  if (misfits == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::setprecision(9) << misfits << " of " << a.rows * a.cols
                                       << " values differ, the first at [" << first / a.cols << ", " << first % a.cols
                                       << "]: " << a.data[first] << " and " << b.data[first]
                                       << "; the largest difference " << largest;
}

}  // namespace

::testing::AssertionResult same_values(RowsView a, RowsView b) {
  return compare(a, b, [](float x, float y) { return x == y; });
}

::testing::AssertionResult all_close(RowsView a, RowsView b, double rtol, double atol) {
  return compare(a, b, [&](float x, float y) {
    return x == y || std::abs(static_cast<double>(x) - y) <= atol + rtol * std::abs(static_cast<double>(y));
  });
}

}  // namespace splitspec::test

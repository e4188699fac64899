#include "common/util/chi_square.h"

#include <cmath>

namespace splitspec {

namespace {

// Regularised lower incomplete gamma P(a, x) by its series (x < a + 1) and
// the upper Q(a, x) by Lentz's continued fraction otherwise.
double gamma_p_series(double a, double x) {
  double sum = 1.0 / a, term = sum;
  for (int n = 1; n < 10000; ++n) {
    term *= x / (a + n);
    sum += term;
    if (std::abs(term) < std::abs(sum) * 1e-15) break;
  }
  return sum * std::exp(-x + a * std::log(x) - std::lgamma(a));
}

double gamma_q_fraction(double a, double x) {
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1.0) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - std::lgamma(a)) * h;
}

}  // namespace

double chi_square_pvalue(double statistic, int dof) {
  if (statistic <= 0) return 1.0;
  const double a = dof / 2.0, x = statistic / 2.0;
  return x < a + 1.0 ? 1.0 - gamma_p_series(a, x) : gamma_q_fraction(a, x);
}

double goodness_of_fit_pvalue(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  int64_t n = 0;
  for (auto c : counts) n += c;
  double stat = 0.0;
  int cells = 0;
  double pooled_expected = 0.0;
  int64_t pooled_observed = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * n;
    if (probs[i] <= 0.0) {
      if (counts[i] > 0) return 0.0;  // mass where the target has none
      continue;
    }
    if (e < 5.0) {
      pooled_expected += e;
      pooled_observed += counts[i];
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  if (pooled_expected > 0.0) {
    stat += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++cells;
  }
  return cells <= 1 ? 1.0 : chi_square_pvalue(stat, cells - 1);
}

}  // namespace splitspec

#pragma once
// Pearson's goodness of fit, for checking that sampled tokens follow a
// distribution (the tests', and splitspec-gpu-bench distribution's).
#include <cstdint>
#include <vector>

namespace splitspec {

// P(X >= statistic) for X chi-square with `dof` degrees of freedom.
double chi_square_pvalue(double statistic, int dof);
// The p-value of `counts` drawn from `probs` (cells expected under 5 pooled;
// a count where probs is 0 gives 0).
double goodness_of_fit_pvalue(const std::vector<int64_t>& counts, const std::vector<double>& probs);

}  // namespace splitspec

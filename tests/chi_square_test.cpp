// The statistical tests below are only as good as their p-values.
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace splitspec::test {

TEST(ChiSquare, MatchesTabulatedQuantiles) {
  // Critical values from standard chi-square tables.
  EXPECT_NEAR(chi_square_pvalue(3.841, 1), 0.05, 1e-4);
  EXPECT_NEAR(chi_square_pvalue(6.635, 1), 0.01, 1e-4);
  EXPECT_NEAR(chi_square_pvalue(11.070, 5), 0.05, 1e-4);
  EXPECT_NEAR(chi_square_pvalue(20.515, 5), 0.001, 1e-5);
  EXPECT_NEAR(chi_square_pvalue(124.342, 100), 0.05, 1e-4);
  EXPECT_DOUBLE_EQ(chi_square_pvalue(0.0, 3), 1.0);
}

TEST(ChiSquare, GoodnessOfFitRejectsMassOutsideSupport) {
  EXPECT_EQ(goodness_of_fit_pvalue({10, 1}, {1.0, 0.0}), 0.0);
  EXPECT_GT(goodness_of_fit_pvalue({500, 500}, {0.5, 0.5}), 0.9);
  EXPECT_LT(goodness_of_fit_pvalue({600, 400}, {0.5, 0.5}), 1e-8);
}

}  // namespace splitspec::test

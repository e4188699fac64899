#pragma once
// Helpers shared by the unit tests.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>

#include "common/model_config.h"

namespace splitspec::test {

// A fresh directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::string str(const std::string& child = "") const { return (child.empty() ? path_ : path_ / child).string(); }

 private:
  std::filesystem::path path_;
};

// Small LLaMA shapes with grouped-query attention (2 query heads per KV head).
ModelConfig tiny_config(int64_t vocab = 50, int64_t layers = 2, bool tied = false);

// ../shared beside the checkout (or $SPLITSPEC_SHARED_DIR), when present.
std::optional<std::filesystem::path> shared_dir();

std::string read_file(const std::filesystem::path& p);
void write_file(const std::filesystem::path& p, const std::string& bytes);

// Upper tail of the chi-square distribution with `dof` degrees of freedom:
// the p-value of a goodness-of-fit statistic.
double chi_square_pvalue(double statistic, int dof);

// Pearson goodness-of-fit of observed counts against expected probabilities.
// Categories with expected probability 0 must have no observations, else the
// p-value is 0. Categories expected below 5 counts are pooled.
double goodness_of_fit_pvalue(const std::vector<int64_t>& counts, const std::vector<double>& probs);

}  // namespace splitspec::test

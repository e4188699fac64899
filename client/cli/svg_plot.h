#pragma once
// A line chart as a standalone SVG file, for reports (no plotting library on
// the target machines).
#include <string>
#include <vector>

namespace splitspec::cli {

struct Series {
  std::string name;
  std::vector<double> y;  // one value per x, in [0, 1]
};

// x: labels along the bottom; every series has one value per label.
void write_line_chart_svg(const std::string& path, const std::string& title, const std::string& x_label,
                          const std::vector<std::string>& x, const std::vector<Series>& series);

}  // namespace splitspec::cli

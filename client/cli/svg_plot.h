#pragma once
// Charts as standalone SVG files, for reports (no plotting library on the
// target machines): a line chart, and a grid of labelled cells.
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

// One panel of a heat map: rows x columns of cells, each filled with the
// colour of its category (by index) and labelled with up to two lines.
struct HeatCell {
  int category = -1;  // -1: no data (grey)
  std::string line1, line2;
};
struct HeatPanel {
  std::string title;
  std::string row_label, column_label;
  std::vector<std::string> rows, columns;
  std::vector<std::vector<HeatCell>> cells;  // [row][column]
};
// Panels side by side, a legend of `categories`, `title` on top and `note`
// (e.g. that the figures are emulated) at the bottom.
void write_heat_map_svg(const std::string& path, const std::string& title, const std::vector<std::string>& categories,
                        const std::vector<HeatPanel>& panels, const std::string& note);

}  // namespace splitspec::cli

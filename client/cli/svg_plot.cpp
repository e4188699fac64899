#include "client/cli/svg_plot.h"

#include <fstream>
#include <sstream>

#include "common/util/error.h"

namespace splitspec::cli {

void write_line_chart_svg(const std::string& path, const std::string& title, const std::string& x_label,
                          const std::vector<std::string>& x, const std::vector<Series>& series) {
  constexpr double W = 640, H = 400, L = 60, R = 150, T = 40, B = 50;
  const double pw = W - L - R, ph = H - T - B;
  auto px = [&](size_t i) { return L + (x.size() > 1 ? pw * static_cast<double>(i) / static_cast<double>(x.size() - 1) : pw / 2); };
  auto py = [&](double v) { return T + ph * (1.0 - v); };
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << title << "</text>\n";
  for (int t = 0; t <= 4; ++t) {
    const double v = t / 4.0;
    o << "<line x1=\"" << L << "\" x2=\"" << L + pw << "\" y1=\"" << py(v) << "\" y2=\"" << py(v) << "\" stroke=\"#ddd\"/>\n";
    o << "<text x=\"" << L - 8 << "\" y=\"" << py(v) + 4 << "\" text-anchor=\"end\">" << v << "</text>\n";
  }
  for (size_t i = 0; i < x.size(); ++i)
    o << "<text x=\"" << px(i) << "\" y=\"" << T + ph + 18 << "\" text-anchor=\"middle\">" << x[i] << "</text>\n";
  o << "<text x=\"" << L + pw / 2 << "\" y=\"" << H - 12 << "\" text-anchor=\"middle\">" << x_label << "</text>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const char* c = colors[s % 4];
    o << "<polyline fill=\"none\" stroke=\"" << c << "\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < series[s].y.size() && i < x.size(); ++i) o << px(i) << "," << py(series[s].y[i]) << " ";
    o << "\"/>\n";
    for (size_t i = 0; i < series[s].y.size() && i < x.size(); ++i)
      o << "<circle cx=\"" << px(i) << "\" cy=\"" << py(series[s].y[i]) << "\" r=\"3\" fill=\"" << c << "\"/>\n";
    o << "<text x=\"" << L + pw + 12 << "\" y=\"" << T + 16 + 18 * s << "\" fill=\"" << c << "\">" << series[s].name << "</text>\n";
  }
  o << "</svg>\n";
  std::ofstream f(path);
  f << o.str();
  if (!f) throw Error(path + ": cannot write the plot");
}

}  // namespace splitspec::cli

#include "client/cli/svg_plot.h"

#include <algorithm>
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

namespace {

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

void write_heat_map_svg(const std::string& path, const std::string& title, const std::vector<std::string>& categories,
                        const std::vector<HeatPanel>& panels, const std::string& note) {
  constexpr double kCellW = 96, kCellH = 44, kLeft = 90, kTop = 70, kGap = 60, kLegend = 150;
  static const char* colors[] = {"#c7d9ee", "#f6c4a5", "#b9e0b0", "#d9c8ea", "#f4e3a1", "#e8b7c8"};
  // The note, a line per "; "-separated part: it is longer than a panel.
  std::vector<std::string> note_lines;
  for (size_t at = 0; at <= note.size();) {
    const size_t end = std::min(note.find("; ", at), note.size());
    note_lines.push_back(note.substr(at, end - at));
    at = end + 2;
  }
  double width = kLeft + kLegend, height = kTop + 60 + 14.0 * static_cast<double>(note_lines.size());
  for (const HeatPanel& p : panels) {
    width += kCellW * static_cast<double>(p.columns.size()) + kGap;
    height = std::max(height, kTop + kCellH * static_cast<double>(p.rows.size()) + 60 +
                                  14.0 * static_cast<double>(note_lines.size()));
  }
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << width / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << escaped(title) << "</text>\n";
  double x0 = kLeft;
  for (const HeatPanel& p : panels) {
    const double pw = kCellW * static_cast<double>(p.columns.size());
    o << "<text x=\"" << x0 + pw / 2 << "\" y=\"46\" text-anchor=\"middle\" font-size=\"13\">" << escaped(p.title)
      << "</text>\n";
    for (size_t c = 0; c < p.columns.size(); ++c)
      o << "<text x=\"" << x0 + kCellW * (static_cast<double>(c) + 0.5) << "\" y=\"" << kTop - 6
        << "\" text-anchor=\"middle\">" << escaped(p.columns[c]) << "</text>\n";
    for (size_t r = 0; r < p.rows.size(); ++r) {
      const double y = kTop + kCellH * static_cast<double>(r);
      o << "<text x=\"" << x0 - 6 << "\" y=\"" << y + kCellH / 2 + 4 << "\" text-anchor=\"end\">" << escaped(p.rows[r])
        << "</text>\n";
      for (size_t c = 0; c < p.columns.size() && c < p.cells[r].size(); ++c) {
        const HeatCell& cell = p.cells[r][c];
        const double x = x0 + kCellW * static_cast<double>(c);
        const char* fill = cell.category < 0 ? "#eeeeee" : colors[static_cast<size_t>(cell.category) % 6];
        o << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << kCellW << "\" height=\"" << kCellH << "\" fill=\""
          << fill << "\" stroke=\"white\" stroke-width=\"2\"/>\n";
        o << "<text x=\"" << x + kCellW / 2 << "\" y=\"" << y + 18 << "\" text-anchor=\"middle\">" << escaped(cell.line1)
          << "</text>\n";
        o << "<text x=\"" << x + kCellW / 2 << "\" y=\"" << y + 33 << "\" text-anchor=\"middle\" font-weight=\"bold\">"
          << escaped(cell.line2) << "</text>\n";
      }
    }
    const double below = kTop + kCellH * static_cast<double>(p.rows.size());
    o << "<text x=\"" << x0 + pw / 2 << "\" y=\"" << below + 18 << "\" text-anchor=\"middle\">" << escaped(p.column_label)
      << "</text>\n";
    o << "<text x=\"" << x0 - 60 << "\" y=\"" << kTop - 24 << "\">" << escaped(p.row_label) << "</text>\n";
    x0 += pw + kGap;
  }
  for (size_t k = 0; k < categories.size(); ++k) {
    const double y = kTop + 22.0 * static_cast<double>(k);
    o << "<rect x=\"" << x0 << "\" y=\"" << y << "\" width=\"14\" height=\"14\" fill=\"" << colors[k % 6] << "\"/>\n";
    o << "<text x=\"" << x0 + 20 << "\" y=\"" << y + 11 << "\">" << escaped(categories[k]) << "</text>\n";
  }
  for (size_t k = 0; k < note_lines.size(); ++k)
    o << "<text x=\"" << 12 << "\" y=\"" << height - 10 - 14.0 * static_cast<double>(note_lines.size() - 1 - k)
      << "\" font-style=\"italic\">" << escaped(note_lines[k]) << "</text>\n";
  o << "</svg>\n";
  std::ofstream f(path);
  f << o.str();
  if (!f) throw Error(path + ": cannot write the plot");
}

}  // namespace splitspec::cli

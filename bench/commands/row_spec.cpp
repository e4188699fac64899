#include "bench/commands/row_spec.h"

namespace splitspec::cli {

RowSpec parse_row_spec(const std::string& row) {
  RowSpec out;
  out.name = row.substr(0, row.find('/'));
  for (size_t at = row.find('/'); at != std::string::npos;) {
    const size_t end = row.find('/', at + 1);
    const std::string setting = row.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
    const size_t eq = setting.find('=');
    RowSetting r;
    r.text = setting;
    r.key = setting.substr(0, eq);
    r.has_value = eq != std::string::npos;
    if (r.has_value) r.value = setting.substr(eq + 1);
    out.settings.push_back(std::move(r));
    at = end;
  }
  return out;
}

}  // namespace splitspec::cli

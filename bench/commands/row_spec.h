#pragma once
// A benchmark row named with settings of its own, "name/KEY=VALUE/KEY=VALUE",
// so that variants run beside each other in one interleaved run.
#include <string>
#include <vector>

namespace splitspec::cli {

struct RowSetting {
  std::string text;        // as written
  std::string key, value;  // split at the first '='
  bool has_value = false;  // whether there was one
};

struct RowSpec {
  std::string name;
  std::vector<RowSetting> settings;  // in order
};

RowSpec parse_row_spec(const std::string& row);

}  // namespace splitspec::cli

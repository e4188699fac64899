#include "common/util/shipped_files.h"

#include <filesystem>

#include "common/util/error.h"

namespace fs = std::filesystem;

namespace splitspec {

std::vector<std::string> shipped_file_candidates(const std::string& name) {
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (!ec) {
    out.push_back((exe_dir / name).string());
    out.push_back((exe_dir / ".." / "lib" / name).string());
    out.push_back((exe_dir / ".." / "bin" / name).string());
  }
  out.push_back((fs::path(SPLITSPEC_MODULE_DIR) / name).string());
  out.push_back((fs::path(SPLITSPEC_MODULE_DIR) / ".." / "bin" / name).string());
  return out;
}

std::string find_shipped_program(const std::string& name, const char* what) {
  for (const auto& c : shipped_file_candidates(name))
    if (fs::exists(c)) return c;
  throw Error(std::string("cannot find ") + what + " " + name);
}

}  // namespace splitspec

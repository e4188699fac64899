#include "common/train/output_dir.h"

#include <filesystem>
#include <fstream>

#include "common/util/error.h"

namespace splitspec {

namespace fs = std::filesystem;

void prepare_output_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw Error(dir + ": cannot create the output directory" + (ec ? ": " + ec.message() : std::string()));
  const fs::path probe = fs::path(dir) / ".write-probe";
  {
    std::ofstream f(probe);
    if (!f) throw Error(dir + ": the output directory is not writable");
  }
  fs::remove(probe, ec);
}

void prepare_output_file(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  prepare_output_dir(parent.empty() ? "." : parent.string());
}

}  // namespace splitspec

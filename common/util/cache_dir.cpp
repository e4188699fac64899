#include "common/util/cache_dir.h"

#include <cstdlib>
#include <filesystem>

namespace splitspec {

std::string user_cache_dir(const std::string& sub) {
  namespace fs = std::filesystem;
  fs::path base;
  if (const char* d = std::getenv("SPLITSPEC_CACHE_DIR"); d && *d) base = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) base = fs::path(x) / "splitspec";
  else if (const char* h = std::getenv("HOME"); h && *h) base = fs::path(h) / ".cache" / "splitspec";
  else base = fs::temp_directory_path() / "splitspec-cache";
  return (base / sub).string();
}

}  // namespace splitspec

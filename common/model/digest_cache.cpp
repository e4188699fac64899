#include "common/model/digest_cache.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/model/model.h"
#include "common/util/cache_dir.h"
#include "common/util/fnv1a.h"

namespace splitspec {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFileName = "weights_digest.json";

// The files whose bytes the digest covers, each with its size and
// modification time: what must be unchanged for a kept digest to hold.
json stamps(const fs::path& model) {
  std::vector<fs::path> files;
  if (fs::is_regular_file(model)) {
    files.push_back(model);
  } else {
    for (const auto& e : fs::directory_iterator(model))
      if (e.is_regular_file() && (e.path().extension() == ".safetensors" || e.path().filename() == "config.json"))
        files.push_back(e.path());
    std::sort(files.begin(), files.end());
  }
  json out = json::object();
  for (const fs::path& f : files)
    out[f.filename().string()] = {{"size", fs::file_size(f)},
                                  {"mtime_ns", fs::last_write_time(f).time_since_epoch().count()}};
  return out;
}

std::string read_digest(const fs::path& file, const std::string& model, const json& want) {
  std::ifstream in(file);
  if (!in) return {};
  try {
    const json j = json::parse(in);
    if (j.value("path", std::string()) != model || j.value("files", json()) != want) return {};
    return j.value("digest", std::string());
  } catch (const json::exception&) {
    return {};
  }
}

bool write_digest(const fs::path& file, const json& j) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  const fs::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << "\n";
    if (!out) {
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

}  // namespace

std::string cached_weights_digest(const std::string& model_path, const std::function<std::string()>& compute) {
  std::error_code ec;
  const std::string model = fs::absolute(model_path, ec).lexically_normal().string();
  const json want = stamps(model);
  const fs::path beside = fs::path(model_side_dir(model)) / kFileName;
  const fs::path kept = fs::path(user_cache_dir("digests")) / (fnv1a_hex(model) + ".json");
  for (const fs::path& f : {beside, kept})
    if (std::string d = read_digest(f, model, want); !d.empty()) return d;
  const std::string digest = compute();
  const json j = {{"path", model}, {"files", want}, {"digest", digest}};
  if (!write_digest(beside, j)) write_digest(kept, j);
  return digest;
}

}  // namespace splitspec

#pragma once
// Backends by device kind: "cpu" is built in; "cuda" registers itself in
// the programs that link the CUDA backend (cuda/, built where nvcc is found).
// The client library links none but the CPU's, so a robot's build stays free
// of CUDA.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/backend/backend.h"

namespace splitspec {

// Where a target computes: "cpu", "cuda" (device 0) or "cuda:N".
struct Device {
  std::string kind = "cpu";
  int index = 0;
  std::string str() const;
  bool cpu() const { return kind == "cpu"; }
};
// Throws splitspec::Error naming the forms for anything else.
Device parse_device(const std::string& text);

struct BackendOptions {
  Device device;
  KVType kv_type = KVType::F32;
  // Matrices converted to this type at load (the CPU's --dtype); a GPU
  // takes the file's types.
  std::optional<WType> weight_type;
};

using BackendFactory = std::function<std::shared_ptr<Backend>(const std::string& path, const BackendOptions&)>;

// Registers the backend of a device kind; returns true, so that a static
// initialiser can call it. A kind registered twice keeps its first.
bool register_backend(const std::string& kind, BackendFactory factory);
// The kinds this program can open, "cpu" first.
std::vector<std::string> backend_kinds();

// The target at `path` (a GGUF file or a model directory) on `options.device`.
// Throws splitspec::Error for a kind this program was built without (naming
// the ones it has), and whatever the backend throws at load.
std::shared_ptr<Backend> open_backend(const std::string& path, const BackendOptions& options);

}  // namespace splitspec

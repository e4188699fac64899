// libFuzzer target: a .safetensors file of any bytes opens, or is refused
// with splitspec::Error; nothing else (a crash, a sanitizer report, another
// exception) is acceptable.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "common/util/error.h"
#include "common/weights/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/splitspec-fuzz-" + std::to_string(getpid()) + ".safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    splitspec::SafetensorsFile file(path);
    for (const auto& [name, t] : file.tensors()) (void)name, (void)t;
  } catch (const splitspec::Error&) {
  }
  return 0;
}

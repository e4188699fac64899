// libFuzzer target: a server config file of any bytes loads or is refused
// with splitspec::Error naming the file.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "common/util/error.h"
#include "server/server_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/splitspec-fuzz-" + std::to_string(getpid()) + ".json";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    splitspec::ServerConfig::from_file(path);
  } catch (const splitspec::Error&) {
  }
  return 0;
}

// libFuzzer target: config.json of any bytes parses to a valid ModelConfig or
// is refused with splitspec::Error.
#include <cstdint>
#include <string>

#include "common/model/model_config.h"
#include "common/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    splitspec::parse_model_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const splitspec::Error&) {
  }
  return 0;
}

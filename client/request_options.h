#pragma once
// The public Request (client_options.h, free of LibTorch types) as the library's
// GenerateOptions.
#include "client/client_options.h"
#include "common/decoding/generate_options.h"

namespace splitspec {

// Throws splitspec::Error for out-of-range values.
GenerateOptions to_generate_options(const Request& request);

}  // namespace splitspec

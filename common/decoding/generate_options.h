#pragma once
// What one generation asks for, shared by every mode, local or remote.
#include <cstdint>
#include <string>

#include "common/decoding/sampling.h"

namespace splitspec {

struct GenerateOptions {
  int32_t max_new_tokens = 128;
  SamplingParams sampling;
  bool ignore_eos = false;  // keep going past EOS (benchmarks want fixed lengths)
};

// kCancelled: stopped by the caller (Client::cancel, a callback); never on the wire.
enum class FinishReason { kNone, kLength, kEos, kContext, kCancelled };
// "", "length", "eos", "context", "cancelled".
std::string finish_reason_name(FinishReason reason);

}  // namespace splitspec

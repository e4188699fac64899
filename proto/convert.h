#pragma once
// Between wire messages and the library's own types, in one place for the
// client and the server.
#include "common/decoding/generate_options.h"
#include "proto/splitspec.pb.h"

namespace splitspec {

v1::SamplingParams to_wire(const SamplingParams& p);
SamplingParams from_wire(const v1::SamplingParams& p);
v1::FinishReason to_wire(FinishReason r);
FinishReason from_wire(v1::FinishReason r);

}  // namespace splitspec

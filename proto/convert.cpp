#include "proto/convert.h"

namespace splitspec {

v1::SamplingParams to_wire(const SamplingParams& p) {
  v1::SamplingParams w;
  w.set_temperature(p.temperature);
  w.set_top_k(p.top_k);
  w.set_top_p(p.top_p);
  w.set_seed(p.seed);
  return w;
}

SamplingParams from_wire(const v1::SamplingParams& w) {
  SamplingParams p;
  p.temperature = w.temperature();
  p.top_k = w.top_k();
  // proto3 cannot tell an unset top_p from 0, and 0 would keep nothing.
  p.top_p = w.top_p() == 0.0f ? 1.0f : w.top_p();
  p.seed = w.seed();
  return p;
}

v1::FinishReason to_wire(FinishReason r) {
  switch (r) {
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kEos: return v1::FINISH_REASON_EOS;
    case FinishReason::kContext: return v1::FINISH_REASON_CONTEXT;
    case FinishReason::kNone:
    case FinishReason::kCancelled: break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

FinishReason from_wire(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_LENGTH: return FinishReason::kLength;
    case v1::FINISH_REASON_EOS: return FinishReason::kEos;
    case v1::FINISH_REASON_CONTEXT: return FinishReason::kContext;
    default: break;
  }
  return FinishReason::kNone;
}

}  // namespace splitspec

#pragma once
// Cloud-only autoregressive decoding: the target generates every token, one
// compute job per token so that concurrent streams interleave.
#include "server/service.h"

namespace splitspec {

// The initial metadata key an admitted Generate call sends before its
// first token.
inline constexpr const char* kAdmittedKey = "splitspec-admitted";

grpc::ServerWriteReactor<v1::GenerateResponse>* new_generate_reactor(ServiceContext& ctx,
                                                                    grpc::CallbackServerContext* context,
                                                                    const v1::GenerationRequest& request);

}  // namespace splitspec

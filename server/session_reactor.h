#pragma once
// One speculative-decoding session: Open, then a Draft per round, each
// verified on the compute worker against the session's own KV cache.
#include "server/service.h"

namespace splitspec {

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>* new_session_reactor(
    ServiceContext& ctx, grpc::CallbackServerContext* context);

}  // namespace splitspec

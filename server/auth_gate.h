#pragma once
// Bearer tokens, and the names on mutual-TLS client certificates, checked by
// gRPC's transport through an AuthMetadataProcessor, so that a call without
// an accepted token or name is refused before any handler (or gRPC's
// reflection) runs and before its request body is parsed. Health calls need
// neither: Kubernetes' probes carry none.
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "server/service.h"

namespace splitspec {

// `credentials` (TLS), or plaintext when null, refusing every call but
// health that lacks one of ctx.auth's tokens (when set) with
// UNAUTHENTICATED, or over TLS whose client certificate has none of
// tls_client_names (when set) with PERMISSION_DENIED.
std::shared_ptr<grpc::ServerCredentials> gated_credentials(std::shared_ptr<grpc::ServerCredentials> credentials,
                                                           ServiceContext& ctx);

}  // namespace splitspec

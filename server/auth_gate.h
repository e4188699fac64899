#pragma once
// Bearer tokens, and the names on mutual-TLS client certificates, checked by
// gRPC's transport through an AuthMetadataProcessor, so that a call without
// an accepted token or name is refused before any handler (or gRPC's
// reflection) runs and before its request body is parsed. Health calls need
// neither: Kubernetes' probes carry none.
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/service.h"

namespace splitspec {

// `credentials` (TLS), or plaintext when null, refusing every call but
// health that lacks one of ctx.auth's tokens (when set) with
// UNAUTHENTICATED, or over TLS whose client certificate has none of
// tls_client_names (when set) with PERMISSION_DENIED.
std::shared_ptr<grpc::ServerCredentials> gated_credentials(std::shared_ptr<grpc::ServerCredentials> credentials,
                                                           ServiceContext& ctx);

// The checks both doors make, counted in unauthenticated_requests_total and
// logged: nullopt when accepted, else the refusal's message. Names are
// checked only when tls_client_names is set, tokens only when ctx.auth is.
std::optional<std::string> refused_client_names(ServiceContext& ctx, const std::vector<std::string>& names);
// `authorization`: the header's value; `door`, `what` (method or path) and
// `peer` (when the door knows it) for the log.
std::optional<std::string> refused_token(ServiceContext& ctx, const std::optional<std::string>& authorization,
                                         std::string_view door, const std::string& what, const std::string& peer = "");

}  // namespace splitspec

#pragma once
// gRPC status codes by their names, for errors people read and for metric
// labels; client and server share it.
#include <grpcpp/support/status.h>

#include <string>

namespace splitspec {

// "OK", "UNAVAILABLE", "UNAUTHENTICATED", ... ("code N" beyond the 17 known).
std::string code_name(grpc::StatusCode code);

}  // namespace splitspec

#pragma once
// HOST:PORT as every listener and upstream here takes it: an IPv6 host in
// brackets ("[::1]:50051") loses them; the port is a number in [0, 65535].
#include <string>
#include <utility>

namespace splitspec {

// {host, port}; throws splitspec::Error naming `what` (e.g. "http_listen")
// when there is no host or the port is not a number in range.
std::pair<std::string, int> split_host_port(const std::string& address, const std::string& what);

}  // namespace splitspec

#include "common/util/host_port.h"

#include "common/util/error.h"

namespace splitspec {

std::pair<std::string, int> split_host_port(const std::string& address, const std::string& what) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    throw Error(what + " must be HOST:PORT, got '" + address + "'");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = address.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) > 65535)
    throw Error(what + " " + address + ": port must be a number in [0, 65535]");
  return {host, std::stoi(port)};
}

}  // namespace splitspec

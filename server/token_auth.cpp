#include "server/token_auth.h"

#include <fstream>

#include "common/util/error.h"

namespace splitspec {

namespace {

// Equal length and bytes, touching every byte of the longer of the two.
bool same_bytes(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

TokenAuth TokenAuth::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open the auth tokens file");
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    tokens.push_back(line.substr(start));
  }
  if (tokens.empty()) throw Error(path + ": the auth tokens file holds no token (one a line)");
  return TokenAuth(std::move(tokens));
}

TokenAuth::TokenAuth(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}

bool TokenAuth::accepts(const std::string& given) const {
  bool ok = false;
  for (const std::string& t : tokens_) ok |= same_bytes(t, given);
  return ok;
}

grpc::Status TokenAuth::check(const grpc::ServerContextBase& context) const {
  const auto& md = context.client_metadata();
  const auto it = md.find("authorization");
  if (it == md.end())
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this server requires a bearer token (authorization: Bearer <token>); give the client one");
  const std::string value(it->second.data(), it->second.size());
  static const std::string kBearer = "Bearer ";
  if (value.compare(0, kBearer.size(), kBearer) != 0 || !accepts(value.substr(kBearer.size())))
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "the bearer token was not accepted");
  return grpc::Status::OK;
}

}  // namespace splitspec

#pragma once
// Bearer-token authentication of the server's RPCs (health excepted): the
// tokens come from a file, one a line, and a call's "authorization: Bearer
// <token>" is compared with every one of them in constant time, so response
// timing tells nothing about how much of a guess was right.
#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

namespace splitspec {

class TokenAuth {
 public:
  // Reads `path`; blank lines and lines starting with # are skipped. Throws
  // splitspec::Error for a missing or empty file.
  static TokenAuth from_file(const std::string& path);
  explicit TokenAuth(std::vector<std::string> tokens);

  // OK, or UNAUTHENTICATED saying what was missing or wrong.
  grpc::Status check(const grpc::ServerContextBase& context) const;
  // Whether `given` equals one of the tokens, in time independent of where
  // it differs.
  bool accepts(const std::string& given) const;

 private:
  std::vector<std::string> tokens_;
};

}  // namespace splitspec

#pragma once
// Bearer-token authentication of the server's RPCs (health excepted): the
// tokens come from a file, one a line, and a call's "authorization: Bearer
// <token>" is compared with every one of them in constant time, so response
// timing tells nothing about how much of a guess was right.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace splitspec {

class TokenAuth {
 public:
  // Reads `path`; blank lines and lines starting with # are skipped. Throws
  // splitspec::Error for a missing or empty file. With `reload` above zero,
  // a check finding the file changed (at most once per `reload`) reads it
  // again, so rotating a token (a Kubernetes Secret updated in place) needs
  // no restart; a file missing or empty at that moment (mid-rotation) keeps
  // the tokens in force, with a warning.
  static std::unique_ptr<TokenAuth> from_file(const std::string& path,
                                              std::chrono::milliseconds reload = std::chrono::milliseconds(0));
  explicit TokenAuth(std::vector<std::string> tokens);

  // Whether `given` equals one of the tokens, in time independent of where
  // it differs.
  bool accepts(const std::string& given) const;
  // The credentials of an authorization header's value under the Bearer
  // scheme, whose name is case-insensitive (RFC 7235), after its spaces;
  // nullopt for another scheme.
  static std::optional<std::string> bearer(const std::string& value);
  // A name for a token in limits and logs: half of a 64-bit digest, enough
  // to tell tokens apart, too little to help anyone guess one.
  static std::string identity(const std::string& token);

 private:
  using Tokens = std::shared_ptr<const std::vector<std::string>>;
  Tokens current() const;

  std::string path_;  // empty: fixed tokens
  std::chrono::milliseconds reload_{0};
  mutable std::mutex mu_;
  mutable Tokens tokens_;
  mutable std::string signature_;  // the file's inode, size and mtime when read
  mutable std::chrono::steady_clock::time_point next_look_{};
};

}  // namespace splitspec

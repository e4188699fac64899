#include "server/token_auth.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cctype>
#include <fstream>

#include "common/util/error.h"
#include "common/util/fnv1a.h"

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

std::vector<std::string> read_tokens(const std::string& path) {
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
  return tokens;
}

// What changes when the file is rewritten or, as Kubernetes does, replaced
// through a symbolic link; empty when it cannot be read.
std::string signature(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  return std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

}  // namespace

std::unique_ptr<TokenAuth> TokenAuth::from_file(const std::string& path, std::chrono::milliseconds reload) {
  const std::string sig = signature(path);
  auto auth = std::make_unique<TokenAuth>(read_tokens(path));
  auth->path_ = path;
  auth->reload_ = reload;
  auth->signature_ = sig;
  auth->next_look_ = std::chrono::steady_clock::now() + reload;
  return auth;
}

TokenAuth::TokenAuth(std::vector<std::string> tokens)
    : tokens_(std::make_shared<const std::vector<std::string>>(std::move(tokens))) {}

TokenAuth::Tokens TokenAuth::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (path_.empty() || reload_.count() <= 0) return tokens_;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_look_) return tokens_;
  next_look_ = now + reload_;
  const std::string sig = signature(path_);
  if (sig == signature_) return tokens_;
  try {
    auto fresh = std::make_shared<const std::vector<std::string>>(read_tokens(path_));
    spdlog::info("event=auth_tokens_reloaded file={} tokens={}", path_, fresh->size());
    tokens_ = std::move(fresh);
    signature_ = sig;
  } catch (const Error& e) {
    spdlog::warn("event=auth_tokens_reload_failed error=\"{}\" keeping={}", e.what(), tokens_->size());
  }
  return tokens_;
}

bool TokenAuth::accepts(const std::string& given) const {
  const Tokens tokens = current();
  bool ok = false;
  for (const std::string& t : *tokens) ok |= same_bytes(t, given);
  return ok;
}

std::optional<std::string> TokenAuth::bearer(const std::string& value) {
  static const std::string kScheme = "bearer";
  if (value.size() <= kScheme.size() || value[kScheme.size()] != ' ') return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(value[i])) != kScheme[i]) return std::nullopt;
  const size_t start = value.find_first_not_of(' ', kScheme.size());
  return start == std::string::npos ? std::string() : value.substr(start);
}

std::string TokenAuth::identity(const std::string& token) { return fnv1a_hex(token).substr(0, 8); }

}  // namespace splitspec

#include "common/tokenizer.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "common/error.h"
#include "common/sentencepiece_backend.h"

namespace fs = std::filesystem;

namespace splitspec {

namespace {

std::string fnv1a_hex(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Loads the isolated sentencepiece module once per process. Looked for beside
// the running binary first (build/bin -> build/lib, or an install's bin ->
// lib), then where this build put it, then on the loader's path.
CreateSentencePieceBackend sentencepiece_factory() {
  static CreateSentencePieceBackend factory = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("SPLITSPEC_SENTENCEPIECE_MODULE")) candidates.push_back(env);
    std::error_code ec;
    const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    if (!ec) {
      candidates.push_back((exe_dir / ".." / "lib" / kSentencePieceModuleName).string());
      candidates.push_back((exe_dir / kSentencePieceModuleName).string());
    }
    candidates.push_back(std::string(SPLITSPEC_MODULE_DIR) + "/" + kSentencePieceModuleName);
    candidates.push_back(kSentencePieceModuleName);
    for (const auto& path : candidates) {
      if (path.find('/') != std::string::npos && !fs::exists(path)) continue;
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!handle) {
        error += std::string("\n  ") + dlerror();
        continue;
      }
      factory = reinterpret_cast<CreateSentencePieceBackend>(dlsym(handle, kCreateSentencePieceBackendSymbol));
      if (factory) return;
      error += "\n  " + path + ": no symbol " + kCreateSentencePieceBackendSymbol;
    }
  });
  if (!factory) throw Error(std::string("cannot load the sentencepiece module ") + kSentencePieceModuleName + error);
  return factory;
}

// U+FFFD, which SentencePiece emits for bytes that do not form a whole character yet.
constexpr const char* kReplacement = "\xEF\xBF\xBD";

}  // namespace

Tokenizer::Tokenizer(const std::string& path) : sp_(sentencepiece_factory()()) {
  fs::path p(path);
  if (fs::is_directory(p)) p /= "tokenizer.model";
  if (!fs::exists(p)) throw Error(p.string() + ": tokenizer file not found");
  const std::string err = sp_->load(p.string());
  if (!err.empty()) throw Error(p.string() + ": cannot load SentencePiece model: " + err);
  fingerprint_ = fnv1a_hex(sp_->serialized_model());
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const std::string err = sp_->encode(text, &ids);
  if (!err.empty()) throw Error("tokenizer: encode failed: " + err);
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  const int n = sp_->piece_size();
  std::vector<int> v;
  v.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= n) throw Error("tokenizer: token id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(n));
    v.push_back(id);
  }
  std::string out;
  const std::string err = sp_->decode(v, &out);
  if (!err.empty()) throw Error("tokenizer: decode failed: " + err);
  return out;
}

int32_t Tokenizer::vocab_size() const { return sp_->piece_size(); }
int32_t Tokenizer::bos_id() const { return sp_->bos_id(); }
int32_t Tokenizer::eos_id() const { return sp_->eos_id(); }

TextStreamer::TextStreamer(const Tokenizer& tok, std::vector<int32_t> context)
    : tok_(tok), ids_(std::move(context)), context_chars_(tok.decode(ids_).size()) {}

std::string TextStreamer::push(int32_t id) {
  ids_.push_back(id);
  std::string all = tok_.decode(ids_);
  if (all.size() < context_chars_ + emitted_.size()) return {};
  std::string fresh = all.substr(context_chars_ + emitted_.size());
  // Hold back a trailing partial character until its remaining bytes arrive.
  const size_t rl = std::char_traits<char>::length(kReplacement);
  while (fresh.size() >= rl && fresh.compare(fresh.size() - rl, rl, kReplacement) == 0) {
    fresh.resize(fresh.size() - rl);
  }
  emitted_ += fresh;
  return fresh;
}

std::string TextStreamer::finish() {
  std::string all = tok_.decode(ids_);
  if (all.size() <= context_chars_ + emitted_.size()) return {};
  std::string rest = all.substr(context_chars_ + emitted_.size());
  emitted_ += rest;
  return rest;
}

}  // namespace splitspec

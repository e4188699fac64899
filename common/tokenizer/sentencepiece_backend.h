#pragma once
// Boundary between SplitSpec and libsentencepiece.
//
// Debian's libsentencepiece bundles protobuf 3.14 and exports its symbols,
// while LibTorch (and gRPC) load the system's protobuf 3.21. Linked into one
// symbol namespace, either order crashes or aborts at start-up. So
// sentencepiece lives in its own module, loaded with RTLD_LOCAL|RTLD_DEEPBIND
// so it binds to its bundled protobuf and the rest of the process to the
// system's. Only this interface (virtual calls, standard-library types from the
// one shared libstdc++) crosses the boundary; no protobuf symbol does.
#include <string>
#include <vector>

namespace splitspec {

class SentencePieceBackend {
 public:
  virtual ~SentencePieceBackend() = default;
  // Each returns an empty string on success, else the error message.
  virtual std::string load(const std::string& path) = 0;
  virtual std::string encode(const std::string& text, std::vector<int>* ids) const = 0;
  virtual std::string decode(const std::vector<int>& ids, std::string* text) const = 0;
  virtual int piece_size() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual std::string serialized_model() const = 0;
};

// Exported by the module; the tokenizer looks it up with dlsym.
using CreateSentencePieceBackend = SentencePieceBackend* (*)();
constexpr const char* kCreateSentencePieceBackendSymbol = "splitspec_create_sentencepiece_backend";
constexpr const char* kSentencePieceModuleName = "libsplitspec_sentencepiece.so";
// Tokenizer training runs in this helper process instead: the trainer logs to
// std::cerr, which a deep-bound module resolves to libstdc++'s own, never
// constructed copy (executables hold the live one via copy relocation).
constexpr const char* kSentencePieceTrainerName = "splitspec-spm-train";
// The sanitizers' runtime refuses dlopen with RTLD_DEEPBIND, so a sanitized
// build tokenizes in this helper process (sentencepiece_process.h); any build
// does with SPLITSPEC_TOKENIZER_BACKEND=process.
constexpr const char* kSentencePieceServeName = "splitspec-spm-serve";

}  // namespace splitspec

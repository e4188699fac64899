#pragma once
// The server's tokenizer for a client that has none of its own (a text
// prompt with no draft model and no --tokenizer): fetched with GetTokenizer
// and kept on the device, named by its fingerprint, so the next connect
// reads it from disk.
#include <chrono>
#include <string>

namespace splitspec {

class ServerLink;

// Where fetched tokenizers are kept: $SPLITSPEC_CACHE_DIR/tokenizers, else
// $XDG_CACHE_HOME/splitspec/tokenizers, else ~/.cache/splitspec/tokenizers.
std::string tokenizer_cache_dir();

// The path of the server's vocabulary file (FINGERPRINT.gguf in `cache_dir`):
// the cached one when its fingerprint is the server's, else fetched in
// chunks, checked (announced size, fingerprint) and written atomically.
// Throws splitspec::Error naming the server and what went wrong.
std::string fetch_server_tokenizer(ServerLink& link, const std::string& cache_dir, std::chrono::milliseconds timeout);

}  // namespace splitspec

#pragma once
// A SentencePieceBackend that forwards every call to splitspec-spm-serve, a
// helper process linked with libsentencepiece (sentencepiece_serve_main.cpp).
// For builds whose runtime refuses the module's dlopen(RTLD_DEEPBIND): the
// sanitizers'. One helper per backend, ended when the backend is destroyed;
// calls from several threads are serialised.
#include <memory>
#include <string>

#include "common/tokenizer/sentencepiece_backend.h"

namespace splitspec {

// Starts `helper`; throws splitspec::Error if it cannot.
std::unique_ptr<SentencePieceBackend> start_sentencepiece_process(const std::string& helper);

}  // namespace splitspec

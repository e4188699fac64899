#pragma once
// Files installed beside the programs: helper programs and the
// sentencepiece module.
#include <string>
#include <vector>

namespace splitspec {

// Where a file shipped with the binaries may be: beside the running binary
// (build/bin and build/lib, or an install's bin and lib), then where this
// build put it.
std::vector<std::string> shipped_file_candidates(const std::string& name);
// The first candidate that exists; throws splitspec::Error naming `what`.
std::string find_shipped_program(const std::string& name, const char* what);

}  // namespace splitspec

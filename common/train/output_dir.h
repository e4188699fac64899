#pragma once
// Where a training command writes: created with its parents and checked
// writable before any work, so a run never fails at its end for a folder.
#include <string>

namespace splitspec {

// Creates `dir` (and its parents) and checks that a file can be written
// there; throws splitspec::Error naming the directory.
void prepare_output_dir(const std::string& dir);

// The same for the directory that will hold the file `path`.
void prepare_output_file(const std::string& path);

}  // namespace splitspec

#pragma once
// A model's weights digest (WeightSet::digest's definition) kept on disk, so
// a model streamed from disk, whose weights are never all in memory, has its
// identity read once and not at every start.
#include <functional>
#include <string>

namespace splitspec {

// The digest of the model at `model_path` (a directory or a GGUF file):
// the kept one while the model's files (config.json, the weight files) have
// the sizes and modification times it was computed with, else `compute()`'s,
// then kept in weights_digest.json beside the model (FILE.splitspec/ for a
// GGUF file) or, where that cannot be written, in the user's cache folder
// (user_cache_dir("digests")).
std::string cached_weights_digest(const std::string& model_path, const std::function<std::string()>& compute);

}  // namespace splitspec

#pragma once
// Where SplitSpec keeps what it can compute or fetch again (tokenizers a
// server sent, weight digests of read-only models).
#include <string>

namespace splitspec {

// $SPLITSPEC_CACHE_DIR, else $XDG_CACHE_HOME/splitspec, else
// ~/.cache/splitspec, else a folder in the temporary directory; `sub`
// appended. Not created.
std::string user_cache_dir(const std::string& sub);

}  // namespace splitspec

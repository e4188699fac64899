#include "common/tokenizer/stop_strings.h"

#include <algorithm>

namespace splitspec {

std::string StopMatcher::feed(const std::string& text, bool* hit) {
  held_ += text;
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    *hit = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    released_ += out;
    return out;
  }
  // The longest tail of the held text that begins some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_)
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n)
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  released_ += out;
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  released_ += out;
  return out;
}

}  // namespace splitspec

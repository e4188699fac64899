#pragma once
// Stop strings over streamed text (Request::stop): the text is released as it
// comes, except a tail that may still become a stop string, so no callback
// ever sees any part of the stop string itself.
#include <string>
#include <vector>

namespace splitspec {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Takes the next text; returns what may be released now. `*hit` is set
  // when a stop string is complete: the text up to it has then been released.
  std::string feed(const std::string& text, bool* hit);
  // What is still held back, released (the generation ended otherwise).
  std::string flush();
  // Everything released so far.
  const std::string& released() const { return released_; }

 private:
  std::vector<std::string> stops_;
  std::string held_, released_;
};

}  // namespace splitspec

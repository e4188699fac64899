#pragma once
// Reads a drafter's own settings (`--drafter-option KEY=VALUE`) by type, and
// refuses keys the drafter does not know: a typo is an error, never ignored.
#include <map>
#include <set>
#include <string>

namespace splitspec {

class DrafterOptions {
 public:
  DrafterOptions(std::string drafter, const std::map<std::string, std::string>& values);

  std::string text(const std::string& key, const std::string& fallback);
  int integer(const std::string& key, int fallback);
  double real(const std::string& key, double fallback);
  // Throws splitspec::Error for any key not read, naming the known ones.
  void finish() const;

 private:
  const std::string* find(const std::string& key);
  std::string drafter_;
  std::map<std::string, std::string> values_;
  std::set<std::string> known_;
};

}  // namespace splitspec

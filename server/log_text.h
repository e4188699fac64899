#pragma once
// Text from clients, as a log line may carry it: quotes, backslashes and
// control characters escaped, so a request cannot end the line it is logged
// in and forge another (a client's tokenizer fingerprint or a malformed
// draft's message end up in "error=\"...\"").
#include <cstdio>
#include <string>
#include <string_view>

namespace splitspec {

inline std::string log_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char hex[5];
          std::snprintf(hex, sizeof(hex), "\\x%02x", c);
          out += hex;
        } else {
          out += ch;
        }
    }
  }
  return out;
}

}  // namespace splitspec

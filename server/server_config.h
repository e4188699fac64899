#pragma once
// Operator settings of splitspec-server: a JSON file (configs/server.json;
// configs/README.md documents every key) overridden by command-line flags.
// Every option is declared once, in server_options.inc.
#include <cstdint>
#include <string>
#include <vector>

#include "common/decoding/forward_emulation.h"

namespace CLI {
class App;
class Option;
}

namespace splitspec {

struct ServerConfig {
#define SPLITSPEC_SERVER_OPTION(type, member, key, default_value, flags, check, help) type member = default_value;
#include "server/server_options.inc"
#undef SPLITSPEC_SERVER_OPTION

  // Throws splitspec::Error naming the file and key at fault.
  static ServerConfig from_file(const std::string& path);
  // Each option's own check (server_options.inc), then the rules between
  // options.
  void validate() const;
  // validate(), and a target given: what starting a server needs (a config
  // file may leave the target to --target, so from_file cannot ask for it).
  void validate_for_start() const;
};

// An option as users see it: its key in the JSON file, its flags, its
// default as configs/README.md writes it ("" for none, [] for an empty
// list, off for no emulation) and its help.
struct ServerOptionInfo {
  std::string key, flags, default_text, help;
};
std::vector<ServerOptionInfo> server_options();

// Every option as a flag of `app`; after app.parse(), apply() writes those
// given on the command line over `config` (a file's values, or defaults).
class ServerFlags {
 public:
  // CLI11 writes into this object's copy of each option while parsing.
  explicit ServerFlags(CLI::App& app);
  ServerFlags(const ServerFlags&) = delete;
  ServerFlags& operator=(const ServerFlags&) = delete;
  void apply(ServerConfig& config) const;

 private:
  ServerConfig given_;
  std::vector<CLI::Option*> options_;  // one per option, in server_options.inc's order
};

}  // namespace splitspec

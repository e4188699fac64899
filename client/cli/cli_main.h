#pragma once
// What the splitspec programs share around their commands: logging to
// stderr, --log-level, parsing, and one way of reporting a command's error.
#include <vector>

#include "client/cli/commands.h"

namespace splitspec::cli {

// Installs the stderr logger, --log-level and --version (`program` and the
// release) on `app`; call before adding commands.
void setup_cli(CLI::App& app, const std::string& program);
// Parses argv and runs the command that was given: its exit status, or 1
// on an exception (a splitspec::Error or another), reported on stderr.
int run_cli(CLI::App& app, const std::vector<Command>& commands, int argc, char** argv);

}  // namespace splitspec::cli

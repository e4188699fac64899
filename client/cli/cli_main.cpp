#include "client/cli/cli_main.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <iostream>
#include <memory>
#include <string>


namespace splitspec::cli {

namespace {
std::shared_ptr<std::string> log_level = std::make_shared<std::string>("warn");
std::string program_name = "splitspec";
}  // namespace

void setup_cli(CLI::App& app, const std::string& program) {
  // stdout carries generated text or JSON only; every log line goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("splitspec"));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  program_name = program;
  app.require_subcommand(1);
  app.set_version_flag("--version", program + " " + SPLITSPEC_VERSION);
  app.add_option("--log-level", *log_level, "trace|debug|info|warn|error|off")->capture_default_str();
}

int run_cli(CLI::App& app, const std::vector<Command>& commands, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0 with CLI11's text; a usage error is one
    // line like every other error, and exits 1 (CLI11's own codes
    // distinguish kinds nobody scripts against).
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::cerr << program_name << ": error: " << e.what() << " (--help lists the flags)\n";
    return 1;
  }
  spdlog::set_level(spdlog::level::from_str(*log_level));
  for (const auto& cmd : commands) {
    if (!cmd.app->parsed()) continue;
    try {
      return cmd.run();
    } catch (const std::exception& e) {  // splitspec::Error and the rest
      std::cerr << "splitspec: error: " << e.what() << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace splitspec::cli

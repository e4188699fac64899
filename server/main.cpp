// splitspec-server: serves a target model for edge-cloud speculative decoding.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <fstream>
#include <iostream>

#include "common/util/error.h"
#include "server/server.h"

int main(int argc, char** argv) {
  // SIGTERM/SIGINT are taken by sigwait below, never by a handler interrupting
  // gRPC's or OpenMP's threads: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  spdlog::set_default_logger(spdlog::stderr_color_mt("splitspec-server"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  CLI::App app{"splitspec-server: verifies drafts from edge clients with the target model (splitspec.v1 over gRPC)"};
  std::string config_file;
  app.add_option("--config", config_file,
                 "JSON config file (configs/server.json; configs/README.md lists its keys); flags override it");
  splitspec::ServerFlags flags(app);
  bool check_config = false;
  app.add_flag("--check-config", check_config,
               "Check the configuration (file and flags) and exit: 0 if the server would start with it, else 1 with "
               "the key named; loads no model and opens no port");
  app.set_version_flag("--version", std::string("splitspec-server ") + SPLITSPEC_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version as CLI11 prints them; a usage error is one line
    // and exits 1, as the client's.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::cerr << "splitspec-server: error: " << e.what() << " (--help lists the flags)\n";
    return 1;
  }

  try {
    splitspec::ServerConfig config = config_file.empty() ? splitspec::ServerConfig{} : splitspec::ServerConfig::from_file(config_file);
    flags.apply(config);
    config.validate_for_start();
    if (check_config) {
      std::cout << "splitspec-server: configuration OK (target " << config.target_dir << ", listen " << config.listen
                << ", device " << config.device << ")\n";
      return 0;
    }
    spdlog::set_level(spdlog::level::from_str(config.log_level));

    splitspec::Server server(config);
    server.start();
    if (!config.port_file.empty()) {
      // Written whole then renamed, so a reader never sees a partial number.
      const std::string tmp = config.port_file + ".tmp";
      std::ofstream(tmp) << server.port() << "\n";
      std::rename(tmp.c_str(), config.port_file.c_str());
    }
    int sig = 0;
    sigwait(&signals, &sig);
    spdlog::info("event=signal signal={}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server.shutdown();
    return 0;
  } catch (const splitspec::Error& e) {
    std::cerr << "splitspec-server: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "splitspec-server: unexpected error: " << e.what() << "\n";
    return 1;
  }
}

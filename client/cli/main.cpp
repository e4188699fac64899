#include <c10/util/Exception.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "common/util/error.h"

int main(int argc, char** argv) {
  // Training runs large GEMMs on OpenBLAS's threads between LibTorch's OpenMP
  // regions; OpenMP workers that spin after each region take the cores those
  // threads need (measured: 1.55x slower on 2 cores). libgomp reads its wait
  // policy when it loads, before main, so set it and start again. Inference
  // keeps spinning: its kernels run short back-to-back OpenMP regions and no BLAS.
  if (argc > 1 && std::string(argv[1]) == "train" && !std::getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // returns only on failure; then run as we are
  }
  // Benchmarks own the machine: workers that spin between the forward's
  // many short parallel regions instead of sleeping save their wake-up
  // latency (measured: a 50M-parameter Q4_0 decode step on 2 threads, 1.40 ms
  // sleeping, 0.94 ms spinning). llama.cpp's thread pool spins too. Elsewhere
  // the default stays, since a client and a server may share the cores.
  if (argc > 1 && std::string(argv[1]) == "bench" && !std::getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "ACTIVE", 1);
    execv("/proc/self/exe", argv);
  }
  // stdout carries generated text or JSON only; every log line goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("splitspec"));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");

  CLI::App app{"SplitSpec: exact speculative decoding for edge devices and servers"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")->capture_default_str();

  std::vector<splitspec::cli::Command> commands = {
      splitspec::cli::add_generate_command(app),
      splitspec::cli::add_bench_command(app),
      splitspec::cli::add_train_command(app),
      splitspec::cli::add_eval_command(app),
      splitspec::cli::add_netem_command(app),
      splitspec::cli::add_convert_command(app),
      splitspec::cli::add_tokenize_command(app),
  };
  for (auto& c : splitspec::cli::add_server_commands(app)) commands.push_back(std::move(c));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  for (const auto& cmd : commands) {
    if (!cmd.app->parsed()) continue;
    try {
      return cmd.run();
    } catch (const splitspec::Error& e) {
      std::cerr << "splitspec: error: " << e.what() << "\n";
      return 1;
    } catch (const c10::Error& e) {
      std::cerr << "splitspec: internal error in LibTorch: " << e.what_without_backtrace() << "\n";
      return 3;
    } catch (const std::exception& e) {
      std::cerr << "splitspec: error: " << e.what() << "\n";
      return 1;
    }
  }
  return 0;
}

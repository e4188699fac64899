#pragma once
// Subcommands of the `splitspec` CLI. Each registers its flags on the app and
// returns the function that runs it once parsing succeeded.
#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace splitspec::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command add_generate_command(CLI::App& app);
// `bench` and its subcommands (bench/commands/).
Command add_bench_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_netem_command(CLI::App& app);
Command add_convert_command(CLI::App& app);
Command add_tokenize_command(CLI::App& app);
// `info` and `health`, against a running server.
std::vector<Command> add_server_commands(CLI::App& app);
}  // namespace splitspec::cli

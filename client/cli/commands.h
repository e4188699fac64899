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
Command add_bench_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_netem_command(CLI::App& app);
Command add_convert_command(CLI::App& app);
Command add_tokenize_command(CLI::App& app);
// `info` and `health`, against a running server.
std::vector<Command> add_server_commands(CLI::App& app);
// `bench edge-cloud`, registered under `bench`.
std::function<int()> add_bench_edge_cloud(CLI::App& bench);
// `bench regimes`: emulated accelerators, links and devices; who wins where.
std::function<int()> add_bench_regimes(CLI::App& bench);
// `bench exits`, registered under `bench`.
std::function<int()> add_bench_exits(CLI::App& bench);
// `bench local`, registered under `bench`.
std::function<int()> add_bench_local(CLI::App& bench);
std::function<int()> add_bench_drafters(CLI::App& bench);
// `bench load`: concurrent sessions against splitspec-server processes.
std::function<int()> add_bench_load(CLI::App& bench);

}  // namespace splitspec::cli

#pragma once
// The subcommands of `splitspec bench`, each in a file of its own here;
// bench_command.cpp registers them (and `bench forward`) under `bench`.
#include <CLI/CLI.hpp>
#include <functional>

namespace splitspec::cli {

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

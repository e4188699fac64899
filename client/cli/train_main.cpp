// splitspec-train: the commands that need LibTorch (training, and the
// evaluations that share its code), apart so that inference never loads it.
// `splitspec train|eval ...` runs this program with the same arguments.
#include <c10/util/Exception.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "client/cli/cli_main.h"

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
  CLI::App app{"SplitSpec training and evaluation (also run as splitspec train|eval)"};
  app.name("splitspec");
  splitspec::cli::setup_cli(app, "splitspec-train");
  std::vector<splitspec::cli::Command> commands = {
      splitspec::cli::add_train_command(app),
      splitspec::cli::add_eval_command(app),
  };
  for (auto& c : commands) {
    c.run = [run = c.run]() {
      try {
        return run();
      } catch (const c10::Error& e) {
        std::cerr << "splitspec: internal error in LibTorch: " << e.what_without_backtrace() << "\n";
        return 3;
      }
    };
  }
  return splitspec::cli::run_cli(app, commands, argc, argv);
}

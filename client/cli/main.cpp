// splitspec: generation, benchmarks, conversion and the tools around a
// server. Free of LibTorch, so it starts in milliseconds and holds only what
// inference needs; `train` and `eval` run splitspec-train, installed beside it.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "client/cli/cli_main.h"
#include "common/util/error.h"
#include "common/util/shipped_files.h"

namespace {

bool is_training_command(const std::string& word) { return word == "train" || word == "eval"; }

// Hands `splitspec train|eval ...` to splitspec-train with the same arguments.
int run_training_program(char** argv) {
  std::string program;
  try {
    program = splitspec::find_shipped_program("splitspec-train", "the training program");
  } catch (const splitspec::Error& e) {
    std::cerr << "splitspec: error: " << e.what() << " (train and eval run in it; install it beside splitspec)\n";
    return 1;
  }
  execv(program.c_str(), argv);
  std::cerr << "splitspec: error: cannot run " << program << ": " << std::strerror(errno) << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // The first word that is not a global option names the command.
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--log-level") {
      ++i;
      continue;
    }
    if (word.rfind("--log-level=", 0) == 0) continue;
    if (is_training_command(word)) return run_training_program(argv);
    break;
  }
  CLI::App app{"SplitSpec: exact speculative decoding for edge devices and servers"};
  splitspec::cli::setup_cli(app, "splitspec");
  std::vector<splitspec::cli::Command> commands = {
      splitspec::cli::add_generate_command(app),
      splitspec::cli::add_bench_command(app),
      splitspec::cli::add_netem_command(app),
      splitspec::cli::add_convert_command(app),
      splitspec::cli::add_tokenize_command(app),
  };
  for (auto& c : splitspec::cli::add_server_commands(app)) commands.push_back(std::move(c));
  // Listed for --help; main() hands them to splitspec-train before parsing.
  app.add_subcommand("train", "Train a tokenizer, a language model, a draft, exits, tables or a recurrent head (runs splitspec-train)")
      ->allow_extras();
  app.add_subcommand("eval", "Evaluate models: perplexity, speculative acceptance, exits (runs splitspec-train)")
      ->allow_extras();
  return splitspec::cli::run_cli(app, commands, argc, argv);
}

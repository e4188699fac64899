#pragma once
// Trains early-exit adapters by distillation from the final layer (paper 004,
// Fig. 3): the model is frozen; each adapter sees its layer's hidden states
// and is updated only by its own KL(final || exit) loss.
#include <cstdint>
#include <string>
#include <vector>

#include "common/early_exit_eval.h"

namespace splitspec {

struct ExitTrainJob {
  std::string target_dir;
  std::string layers = "all";  // EarlyExits::parse_layers
  std::string corpus;          // training text
  std::string valid;           // held-out text for the report (optional)
  std::string out_dir;         // where early_exits.* go; default: target_dir
  int64_t bottleneck = 64;
  int64_t steps = 300;
  int64_t batch = 8;
  int64_t seq_len = 128;
  double lr = 3e-3;
  uint64_t seed = 1;
  bool progress = true;
};

struct ExitTrainReport {
  std::vector<double> first_losses, last_losses;  // per exit
  std::vector<ExitQuality> before, after;         // on `valid`, when given
  double wall_seconds = 0;
};

ExitTrainReport train_exits(const ExitTrainJob& job);

}  // namespace splitspec

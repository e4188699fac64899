#pragma once
// Trains early-exit adapters by distillation from the final layer (the early-exit edge-cloud
// paper, Fig. 3): the model is frozen; each adapter sees its layer's hidden states
// and is updated only by its own KL(final || exit) loss.
#include <cstdint>
#include <string>
#include <vector>

#include "common/early_exit/early_exit_eval.h"

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
  std::vector<int64_t> kept_layers;  // exits already in the output directory, kept beside the trained ones
  std::string note;                  // why exits already there were not kept, when they were not
  double wall_seconds = 0;
};

// Fresh adapters with up_proj zero, so each starts as the identity (the
// plain "logit lens" of its layer) and training only improves on that.
EarlyExits init_exits(const ModelConfig& config, const std::vector<int64_t>& after_layers, int64_t bottleneck,
                      uint64_t seed);

// Also ranks the vocabulary by frequency in the corpus, for the exits'
// shortlist (EarlyExits::set_shortlist). Exits already in the output
// directory at other layers are kept (EarlyExits::keep_missing_from).
ExitTrainReport train_exits(const ExitTrainJob& job);

// Exits trained before they carried a ranking: ranks the vocabulary by
// frequency in `corpus` and rewrites early_exits.json in `target_dir`, the
// adapters unchanged. Returns how many tokens were ranked.
int64_t rank_exit_tokens(const std::string& target_dir, const std::string& corpus);

}  // namespace splitspec

#pragma once
// A training run's checkpoint: parameters, optimizer state and progress,
// written to a temporary directory and renamed into place, so a kill at any
// moment leaves either the previous checkpoint or the new one, never a torn
// one.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace splitspec {

struct Checkpoint {
  std::filesystem::path dir;
  bool exists() const { return std::filesystem::exists(dir / "state.json"); }
  void save(const std::vector<at::Tensor>& params, torch::optim::Optimizer& opt, int64_t step,
            const std::string& fingerprint) const;
  // Restores params and opt and returns the step; throws splitspec::Error for
  // a checkpoint of another configuration (`fingerprint`) or a corrupt one.
  int64_t load(std::vector<at::Tensor>& params, torch::optim::Optimizer& opt, const std::string& fingerprint) const;
};

}  // namespace splitspec

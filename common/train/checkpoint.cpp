#include "common/train/checkpoint.h"

#include <torch/optim/optimizer.h>
#include <torch/serialize.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/util/error.h"

namespace splitspec {

namespace fs = std::filesystem;
using nlohmann::json;

void Checkpoint::save(const std::vector<at::Tensor>& params, torch::optim::Optimizer& opt, int64_t step,
                      const std::string& fingerprint) const {
  const fs::path tmp = dir.string() + ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::vector<at::Tensor> detached;
  for (const auto& p : params) detached.push_back(p.detach());
  torch::save(detached, (tmp / "params.pt").string());
  torch::save(opt, (tmp / "optimizer.pt").string());
  std::ofstream(tmp / "state.json") << json{{"step", step}, {"config", fingerprint}}.dump() << "\n";
  const fs::path old = dir.string() + ".old";
  fs::remove_all(old);
  if (fs::exists(dir)) fs::rename(dir, old);
  fs::rename(tmp, dir);
  fs::remove_all(old);
}

int64_t Checkpoint::load(std::vector<at::Tensor>& params, torch::optim::Optimizer& opt,
                         const std::string& fingerprint) const {
  json state;
  try {
    state = json::parse(std::ifstream(dir / "state.json"));
  } catch (const json::exception& e) {
    throw Error((dir / "state.json").string() + ": corrupt checkpoint state: " + e.what());
  }
  if (state.value("config", "") != fingerprint)
    throw Error(dir.string() + ": checkpoint was made with a different config; use a new --out");
  std::vector<at::Tensor> saved;
  torch::load(saved, (dir / "params.pt").string());
  if (saved.size() != params.size()) throw Error(dir.string() + ": checkpoint has a different parameter count");
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!saved[i].sizes().equals(params[i].sizes()))
        throw Error(dir.string() + ": checkpoint parameter " + std::to_string(i) + " has a different shape");
      params[i].copy_(saved[i]);
    }
  }
  torch::load(opt, (dir / "optimizer.pt").string());
  return state.at("step").get<int64_t>();
}

}  // namespace splitspec

// libFuzzer target: a target's early-exit adapters (common/early_exit/
// early_exit.cpp), the description early_exits.json and the weights
// early_exits.safetensors together, through EarlyExits::load with LibTorch
// linked. Bad files must give splitspec::Error, never a crash, a sanitizer
// report or another exception. Exits that load must have the shapes the
// description states and, on the demo target, produce logits (whole
// vocabulary and a shortlist of the frequent tokens).
//
// Input: one flags byte, then early_exits.json up to the first NUL byte, then
// early_exits.safetensors (no such file when there is no NUL).
//   flags bit 0: 0 the demo target (models/demo-target: its config, its
//                model for the logits), 1 a tiny config (hidden 4, 4 layers,
//                vocabulary 16) and no model;
//   flags bit 1: no early_exits.json at all (only the weights).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "common/early_exit/early_exit.h"
#include "common/backend/cpu_backend.h"
#include "common/model/model.h"
#include "common/model/model_config.h"
#include "common/model/rows.h"
#include "common/util/error.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void check(bool ok, const char* what) { splitspec::fuzz::check(ok, "fuzz_early_exits", what); }
using splitspec::fuzz::write_file;

namespace fs = std::filesystem;

const char* kTinyConfig = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4,
  "intermediate_size": 8, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
  "head_dim": 2, "vocab_size": 16, "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
  "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": true, "hidden_act": "silu"})";

struct Fixture {
  std::shared_ptr<splitspec::Model> demo;
  splitspec::ModelConfig tiny;
  fs::path dir;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* x = new Fixture;
    x->demo = splitspec::Model::load(std::string(SPLITSPEC_SOURCE_DIR) + "/models/demo-target");
    x->tiny = splitspec::parse_model_config(kTinyConfig, "tiny");
    x->dir = fs::temp_directory_path() / ("splitspec-fuzz-exits-" + std::to_string(getpid()));
    fs::create_directories(x->dir);
    return x;
  }();
  return *f;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fixture();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Fixture& fx = fixture();
  const bool tiny = data[0] & 1, no_json = data[0] & 2;
  const splitspec::ModelConfig& config = tiny ? fx.tiny : fx.demo->config();
  const splitspec::fuzz::SidecarInput in = splitspec::fuzz::split_sidecar(data + 1, size - 1);
  const fs::path json = fx.dir / "early_exits.json", weights = fx.dir / "early_exits.safetensors";
  std::error_code ec;
  fs::remove(json, ec);
  fs::remove(weights, ec);
  if (!no_json && !write_file(json, in.json, in.json_len)) return 0;
  if (in.tensors && !write_file(weights, in.tensors, in.tensors_len)) return 0;

  try {
    std::optional<splitspec::EarlyExits> exits = splitspec::EarlyExits::load(fx.dir.string(), config);
    if (!exits) {
      check(no_json && !in.tensors, "no exits loaded although files were there");
      return 0;
    }
    const int64_t h = config.hidden_size, b = exits->bottleneck();
    check(b >= 1, "bottleneck below 1");
    int64_t last = 0;
    for (const splitspec::ExitAdapter& a : exits->adapters()) {
      check(a.after_layer > last && a.after_layer < config.num_hidden_layers, "exit layers out of order or range");
      last = a.after_layer;
      check(static_cast<int64_t>(a.norm.size()) == h, "norm shape");
      check(static_cast<int64_t>(a.down.size()) == b * h, "down_proj shape");
      check(static_cast<int64_t>(a.up.size()) == h * b, "up_proj shape");
    }
    for (int64_t l : exits->serve_layers()) check(exits->index_of(l) >= 0, "serve layer without an exit");
    for (int32_t t : exits->frequent_tokens()) check(t >= 0 && t < config.vocab_size, "frequent token outside the vocabulary");
    if (!tiny && !exits->adapters().empty()) {
      // One exit (chosen by the input) on two hidden rows: the whole
      // vocabulary, then a shortlist of the most frequent tokens.
      const size_t i = data[size - 1] % exits->adapters().size();
      const std::vector<float> ones(static_cast<size_t>(2 * h), 1.0f);
      const splitspec::RowsView hidden{ones.data(), 2, h};
      const splitspec::Rows logits = exits->logits(splitspec::CpuBackend(*fx.demo), i, hidden);
      check(logits.rows() == 2 && logits.cols() == config.vocab_size, "exit logits shape");
      exits->set_shortlist(splitspec::CpuBackend(*fx.demo), 16);
      const splitspec::Rows scores = exits->scores(splitspec::CpuBackend(*fx.demo), i, hidden);
      const int64_t k = exits->shortlist() > 0 ? exits->shortlist() : config.vocab_size;
      check(scores.rows() == 2 && scores.cols() == k, "shortlist scores shape");
      for (int64_t j = 0; j < k; ++j) {
        const int32_t t = exits->scored_token(j);
        check(t >= 0 && t < config.vocab_size, "scored token outside the vocabulary");
      }
    }
  } catch (const splitspec::Error&) {
  }
  return 0;
}

#include "common/drafting/recurrent_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "common/kernels/kernels.h"
#include "common/util/error.h"
#include "common/util/json_integer.h"
#include "common/weights/safetensors.h"

namespace splitspec {

namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "splitspec-recurrent-drafter";

// Indices into recurrent_head_params().
enum : size_t { kEmbed, kRnnW, kRnnU, kRnnB, kInW, kInB, kBlocks };

std::string head_sidecar(const std::string& safetensors) { return fs::path(safetensors).replace_extension(".json").string(); }

void silu_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

}  // namespace

void RecurrentHeadConfig::validate() const {
  auto in = [](int64_t v, int64_t lo, int64_t hi, const char* what) {
    if (v < lo || v > hi)
      throw Error(std::string("recurrent head: ") + what + " " + std::to_string(v) + " outside [" + std::to_string(lo) +
                  ", " + std::to_string(hi) + "]");
  };
  in(hidden_size, 1, 1 << 16, "hidden_size");
  in(vocab_size, 2, 1 << 22, "vocab_size");
  in(embed_dim, 1, 1 << 14, "embed_dim");
  in(exit_dim, 1, 1 << 14, "exit_dim");
  in(num_blocks, 0, 16, "num_blocks");
  in(rank, 0, 1 << 14, "rank");
}

int64_t HeadParam::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<HeadParam> recurrent_head_params(const RecurrentHeadConfig& c) {
  const int64_t E = c.embed_dim, D = c.exit_dim;
  std::vector<HeadParam> p = {{"embed", {c.vocab_size, E}}, {"rnn.w", {E, E}}, {"rnn.u", {E, E}}, {"rnn.b", {E}},
                              {"in.w", {D, c.hidden_size + E}}, {"in.b", {D}}};
  for (int64_t i = 0; i < c.num_blocks; ++i) {
    p.push_back({"blocks." + std::to_string(i) + ".w", {D, D}});
    p.push_back({"blocks." + std::to_string(i) + ".b", {D}});
  }
  if (c.rank > 0) {
    p.push_back({"vocab.down", {c.rank, D}});
    p.push_back({"vocab.up", {c.vocab_size, c.rank}});
  } else {
    p.push_back({"vocab.w", {c.vocab_size, D}});
  }
  return p;
}

RecurrentHead RecurrentHead::from_floats(const RecurrentHeadConfig& c, const std::vector<std::vector<float>>& params) {
  c.validate();
  const std::vector<HeadParam> shapes = recurrent_head_params(c);
  if (params.size() != shapes.size())
    throw Error("recurrent head: " + std::to_string(params.size()) + " parameters given, " +
                std::to_string(shapes.size()) + " expected");
  RecurrentHead h;
  h.c_ = c;
  h.source_ = "memory";
  for (size_t i = 0; i < shapes.size(); ++i) {
    const int64_t n = shapes[i].numel();
    if (static_cast<int64_t>(params[i].size()) != n)
      throw Error("recurrent head: parameter " + shapes[i].name + " has " + std::to_string(params[i].size()) +
                  " values, " + std::to_string(n) + " expected");
    std::vector<uint16_t> half(static_cast<size_t>(n));
    kernels::float_to_half(params[i].data(), n, half.data());
    std::vector<float> wide;
    if (shapes[i].shape.size() == 1) {
      wide.resize(half.size());
      kernels::half_to_float(half.data(), n, wide.data());
    }
    h.w_.push_back(std::move(half));
    h.bias_.push_back(std::move(wide));
  }
  return h;
}

RecurrentHead RecurrentHead::random(const RecurrentHeadConfig& c, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::vector<float>> params;
  for (const HeadParam& p : recurrent_head_params(c)) {
    const int64_t n = p.numel();
    const float scale = p.shape.size() == 1 ? 0.1f : 1.0f / std::sqrt(static_cast<float>(p.shape.back()));
    std::normal_distribution<float> normal(0.0f, scale * (p.name == "embed" ? 4.0f : 1.0f));
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(gen);
    params.push_back(std::move(v));
  }
  return from_floats(c, params);
}

RecurrentHead RecurrentHead::load(const std::string& path) {
  const std::string file = fs::is_directory(path) ? (fs::path(path) / kRecurrentHeadFile).string() : path;
  const std::string side = head_sidecar(file);
  std::ifstream f(side);
  if (!f)
    throw Error(side + ": no recurrent draft head here (train one with splitspec train recurrent, or point the drafter's "
                       "head option at one)");
  nlohmann::json j;
  RecurrentHeadConfig c;
  try {
    f >> j;
    if (j.at("format").get<std::string>() != kFormat) throw Error(std::string("format is not ") + kFormat);
    c.hidden_size = json_integer<int64_t>(j.at("hidden_size"), "hidden_size");
    c.vocab_size = json_integer<int64_t>(j.at("vocab_size"), "vocab_size");
    c.embed_dim = json_integer<int64_t>(j.at("embed_dim"), "embed_dim");
    c.exit_dim = json_integer<int64_t>(j.at("exit_dim"), "exit_dim");
    c.num_blocks = json_integer<int64_t>(j.at("num_blocks"), "num_blocks");
    c.rank = json_integer<int64_t>(j.at("rank"), "rank");
    c.tokenizer_fingerprint = j.value("tokenizer_fingerprint", std::string());
    c.validate();
  } catch (const std::exception& e) {
    throw Error(side + ": " + e.what());
  }
  SafetensorsFile st(file);
  std::vector<std::vector<float>> params;
  for (const HeadParam& p : recurrent_head_params(c)) {
    auto it = st.tensors().find(p.name);
    if (it == st.tensors().end()) throw Error(file + ": tensor '" + p.name + "' is missing");
    const TensorInfo& t = it->second;
    if (t.shape != p.shape || (t.dtype != DType::F16 && t.dtype != DType::F32))
      throw Error(file + ": tensor '" + p.name + "' is " + dtype_name(t.dtype) + " " + shape_str(t.shape) +
                  ", expected F16 or F32 " + shape_str(p.shape));
    std::vector<float> v(static_cast<size_t>(t.numel()));
    if (t.dtype == DType::F16) {
      std::vector<uint16_t> half(v.size());
      std::memcpy(half.data(), t.data, t.nbytes);
      kernels::half_to_float(half.data(), t.numel(), v.data());
    } else {
      std::memcpy(v.data(), t.data, t.nbytes);
    }
    for (float x : v)
      if (!std::isfinite(x)) throw Error(file + ": tensor '" + p.name + "' holds a value that is not finite");
    params.push_back(std::move(v));
  }
  RecurrentHead h = from_floats(c, params);
  h.source_ = file;
  return h;
}

void RecurrentHead::save(const std::string& dir, const std::string& training_json) const {
  const std::vector<HeadParam> shapes = recurrent_head_params(c_);
  std::vector<TensorToWrite> t;
  for (size_t i = 0; i < shapes.size(); ++i)
    t.push_back({shapes[i].name, DType::F16, shapes[i].shape, w_[i].data(), w_[i].size() * sizeof(uint16_t)});
  const std::string file = (fs::path(dir) / kRecurrentHeadFile).string();
  write_safetensors(file, t);
  nlohmann::json j = {{"format", kFormat},
                      {"version", 1},
                      {"hidden_size", c_.hidden_size},
                      {"vocab_size", c_.vocab_size},
                      {"embed_dim", c_.embed_dim},
                      {"exit_dim", c_.exit_dim},
                      {"num_blocks", c_.num_blocks},
                      {"rank", c_.rank},
                      {"tokenizer_fingerprint", c_.tokenizer_fingerprint},
                      {"training", nlohmann::json::parse(training_json)}};
  const std::string side = head_sidecar(file), tmp = side + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
    if (!f) throw Error(tmp + ": cannot write");
  }
  fs::rename(tmp, side);
}

void RecurrentHead::check_target(int64_t hidden_size, int64_t vocab_size, const std::string& fingerprint) const {
  const std::string why = "; train a head for this target (splitspec train recurrent)";
  if (hidden_size != c_.hidden_size)
    throw Error(source_ + ": head trained for a target of hidden size " + std::to_string(c_.hidden_size) +
                ", but this target's is " + std::to_string(hidden_size) + why);
  if (vocab_size != c_.vocab_size)
    throw Error(source_ + ": head trained for a vocabulary of " + std::to_string(c_.vocab_size) +
                ", but the target has " + std::to_string(vocab_size) + why);
  if (!fingerprint.empty() && !c_.tokenizer_fingerprint.empty() && fingerprint != c_.tokenizer_fingerprint)
    throw Error(source_ + ": head trained with tokenizer " + c_.tokenizer_fingerprint + ", but this one is " +
                fingerprint + why);
}

size_t RecurrentHead::weight_bytes() const {
  size_t n = 0;
  for (size_t i = 0; i < w_.size(); ++i) n += w_[i].size() * sizeof(uint16_t) + bias_[i].size() * sizeof(float);
  return n;
}

void RecurrentHead::advance(float* states, const int32_t* tokens, int64_t n, bool first, Scratch& scratch) const {
  const int64_t E = c_.embed_dim;
  std::vector<float>& a = scratch.a;
  std::vector<float>& b = scratch.b;
  a.resize(static_cast<size_t>(n * E));
  b.resize(static_cast<size_t>(n * E));
  for (int64_t r = 0; r < n; ++r) {
    if (tokens[r] < 0 || tokens[r] >= c_.vocab_size)
      throw Error("recurrent head: token " + std::to_string(tokens[r]) + " outside the vocabulary");
    kernels::half_to_float(w_[kEmbed].data() + tokens[r] * E, E, a.data() + r * E);
  }
  kernels::linear(a.data(), n, MatrixRef{WType::F16, w_[kRnnW].data(), E, E}, b.data());
  if (!first) kernels::linear(states, n, MatrixRef{WType::F16, w_[kRnnU].data(), E, E}, a.data());
  const float* bias = bias_[kRnnB].data();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < E; ++i) states[r * E + i] = b[r * E + i] + (first ? 0.0f : a[r * E + i]) + bias[i];
  silu_inplace(states, n * E);
}

void RecurrentHead::logits(const float* h, const float* states, int64_t n, float* out, Scratch& scratch) const {
  const int64_t H = c_.hidden_size, E = c_.embed_dim, D = c_.exit_dim, in = H + E;
  std::vector<float>& a = scratch.a;
  std::vector<float>& b = scratch.b;
  a.resize(static_cast<size_t>(n * std::max({in, D, c_.rank})));
  b.resize(static_cast<size_t>(n * D));
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(a.data() + r * in, h, H * sizeof(float));
    std::memcpy(a.data() + r * in + H, states + r * E, E * sizeof(float));
  }
  std::vector<float>& z = b;
  kernels::linear(a.data(), n, MatrixRef{WType::F16, w_[kInW].data(), D, in}, z.data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < D; ++i) z[r * D + i] += bias_[kInB][i];
  for (int64_t blk = 0; blk < c_.num_blocks; ++blk) {
    const size_t w = kBlocks + 2 * blk;
    kernels::linear(z.data(), n, MatrixRef{WType::F16, w_[w].data(), D, D}, a.data());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < D; ++i) {
        float& t = a[r * D + i];
        t += bias_[w + 1][i];
        z[r * D + i] += t / (1.0f + std::exp(-t));
      }
  }
  const size_t v = kBlocks + 2 * c_.num_blocks;
  if (c_.rank > 0) {
    kernels::linear(z.data(), n, MatrixRef{WType::F16, w_[v].data(), c_.rank, D}, a.data());
    kernels::linear(a.data(), n, MatrixRef{WType::F16, w_[v + 1].data(), c_.vocab_size, c_.rank}, out);
  } else {
    kernels::linear(z.data(), n, MatrixRef{WType::F16, w_[v].data(), c_.vocab_size, D}, out);
  }
}

}  // namespace splitspec

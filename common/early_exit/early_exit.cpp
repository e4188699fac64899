#include "common/early_exit/early_exit.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/util/error.h"
#include "common/util/json_integer.h"
#include "common/engine/kernels.h"
#include "common/engine/safetensors.h"

namespace splitspec {

namespace fs = std::filesystem;

namespace {
std::string tensor_name(int64_t after_layer, const char* what) {
  return "exits." + std::to_string(after_layer) + "." + what;
}
}  // namespace

std::vector<int64_t> EarlyExits::parse_layers(const std::string& spec, const ModelConfig& c) {
  std::vector<int64_t> out;
  if (spec == "all") {
    for (int64_t l = 1; l < c.num_hidden_layers; ++l) out.push_back(l);
    return out;
  }
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int64_t l = 0;
    try {
      size_t used = 0;
      l = std::stoll(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw Error("exit layers: '" + item + "' is not a layer count (use all or e.g. 2,4,6)");
    }
    if (l < 1 || l >= c.num_hidden_layers)
      throw Error("exit layers: " + std::to_string(l) + " outside 1.." + std::to_string(c.num_hidden_layers - 1) +
                  " (an exit after the last layer is the model itself)");
    if (!out.empty() && l <= out.back()) throw Error("exit layers must be increasing");
    out.push_back(l);
  }
  if (out.empty()) throw Error("exit layers: none given");
  return out;
}

EarlyExits EarlyExits::init(const ModelConfig& c, std::vector<int64_t> after_layers, int64_t bottleneck, uint64_t seed) {
  if (bottleneck < 1) throw Error("exit bottleneck must be at least 1");
  at::Generator gen = at::detail::createCPUGenerator(seed);
  EarlyExits e;
  e.bottleneck_ = bottleneck;
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  for (int64_t l : after_layers) {
    ExitAdapter a;
    a.after_layer = l;
    a.norm = at::ones({c.hidden_size}, f32);
    a.down = at::normal(0.0, 1.0 / std::sqrt(static_cast<double>(c.hidden_size)), {bottleneck, c.hidden_size}, gen, f32);
    a.up = at::zeros({c.hidden_size, bottleneck}, f32);
    e.adapters_.push_back(std::move(a));
  }
  return e;
}

std::optional<EarlyExits> EarlyExits::load(const std::string& dir, const ModelConfig& c) {
  const fs::path json_path = fs::path(dir) / "early_exits.json";
  const fs::path st_path = fs::path(dir) / "early_exits.safetensors";
  if (!fs::exists(json_path) && !fs::exists(st_path)) return std::nullopt;
  if (!fs::exists(json_path)) throw Error(json_path.string() + ": missing (early_exits.safetensors has no description)");
  nlohmann::json j;
  try {
    std::ifstream in(json_path);
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(json_path.string() + ": not valid JSON: " + e.what());
  }
  EarlyExits e;
  std::vector<int64_t> layers;
  try {
    layers = json_integers<int64_t>(j.at("after_layers"), "after_layers");
    e.bottleneck_ = json_integer<int64_t>(j.at("bottleneck"), "bottleneck");
    if (j.contains("serve_layers")) e.serve_layers_ = json_integers<int64_t>(j.at("serve_layers"), "serve_layers");
    if (j.contains("frequent_tokens"))
      e.set_frequent_tokens(json_integers<int32_t>(j.at("frequent_tokens"), "frequent_tokens"), c.vocab_size);
    const int64_t hidden = json_integer<int64_t>(j.at("hidden_size"), "hidden_size");
    if (hidden != c.hidden_size)
      throw Error("hidden_size " + std::to_string(hidden) + " differs from the model's " + std::to_string(c.hidden_size));
  } catch (const nlohmann::json::exception& ex) {
    throw Error(json_path.string() + ": " + ex.what());
  } catch (const Error& ex) {
    throw Error(json_path.string() + ": " + ex.what());
  }
  std::string spec;
  for (int64_t l : layers) spec += (spec.empty() ? "" : ",") + std::to_string(l);
  try {
    parse_layers(spec, c);
  } catch (const Error& ex) {
    throw Error(json_path.string() + ": " + ex.what());
  }
  if (e.bottleneck_ < 1) throw Error(json_path.string() + ": bottleneck must be at least 1");
  for (int64_t l : e.serve_layers_)
    if (std::find(layers.begin(), layers.end(), l) == layers.end())
      throw Error(json_path.string() + ": serve_layers names " + std::to_string(l) + ", which is not an exit");
  SafetensorsFile st(st_path.string());
  auto get = [&](const std::string& name, std::vector<int64_t> shape) {
    auto it = st.tensors().find(name);
    if (it == st.tensors().end()) throw Error(st_path.string() + ": tensor '" + name + "' missing");
    if (it->second.shape != shape)
      throw Error(st_path.string() + ": tensor '" + name + "' has shape " + shape_str(it->second.shape) + ", expected " +
                  shape_str(shape));
    return load_float_tensor(it->second);
  };
  for (int64_t l : layers) {
    ExitAdapter a;
    a.after_layer = l;
    a.norm = get(tensor_name(l, "norm.weight"), {c.hidden_size});
    a.down = get(tensor_name(l, "down_proj.weight"), {e.bottleneck_, c.hidden_size});
    a.up = get(tensor_name(l, "up_proj.weight"), {c.hidden_size, e.bottleneck_});
    e.adapters_.push_back(std::move(a));
  }
  return e;
}

void EarlyExits::save(const std::string& dir) const {
  std::vector<at::Tensor> keep;
  std::vector<TensorToWrite> out;
  for (const ExitAdapter& a : adapters_) {
    for (auto [what, t] : {std::pair<const char*, const at::Tensor*>{"norm.weight", &a.norm},
                           {"down_proj.weight", &a.down},
                           {"up_proj.weight", &a.up}}) {
      keep.push_back(t->detach().to(at::kFloat).contiguous());
      out.push_back({tensor_name(a.after_layer, what), DType::F32, keep.back().sizes().vec(), keep.back().data_ptr(),
                     keep.back().nbytes()});
    }
  }
  write_safetensors((fs::path(dir) / "early_exits.safetensors").string(), out, {{"format", "pt"}});
  nlohmann::json j;
  std::vector<int64_t> layers;
  for (const ExitAdapter& a : adapters_) layers.push_back(a.after_layer);
  j["after_layers"] = layers;
  j["bottleneck"] = bottleneck_;
  j["hidden_size"] = adapters_.empty() ? 0 : adapters_[0].norm.size(0);
  if (!serve_layers_.empty()) j["serve_layers"] = serve_layers_;
  if (!frequent_tokens_.empty()) j["frequent_tokens"] = frequent_tokens_;
  const fs::path tmp = fs::path(dir) / "early_exits.json.tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
    if (!f) throw Error(tmp.string() + ": write failed");
  }
  fs::rename(tmp, fs::path(dir) / "early_exits.json");
}

std::vector<int64_t> EarlyExits::keep_missing_from(const EarlyExits& older) {
  if (older.bottleneck_ != bottleneck_)
    throw Error("exits of bottleneck " + std::to_string(older.bottleneck_) + " cannot join exits of bottleneck " +
                std::to_string(bottleneck_));
  std::vector<int64_t> added;
  for (const ExitAdapter& a : older.adapters_)
    if (index_of(a.after_layer) < 0) {
      adapters_.push_back(a);
      added.push_back(a.after_layer);
    }
  std::sort(adapters_.begin(), adapters_.end(),
            [](const ExitAdapter& x, const ExitAdapter& y) { return x.after_layer < y.after_layer; });
  if (serve_layers_.empty()) serve_layers_ = older.serve_layers_;
  return added;
}

int EarlyExits::index_of(int64_t after_layer) const {
  for (size_t i = 0; i < adapters_.size(); ++i)
    if (adapters_[i].after_layer == after_layer) return static_cast<int>(i);
  return -1;
}

size_t EarlyExits::parameter_count() const {
  size_t n = 0;
  for (const ExitAdapter& a : adapters_) n += a.norm.numel() + a.down.numel() + a.up.numel();
  return n;
}

void EarlyExits::set_frequent_tokens(std::vector<int32_t> ids, int64_t vocab_size) {
  std::vector<bool> seen(static_cast<size_t>(vocab_size), false);
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size)
      throw Error("frequent_tokens: id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(vocab_size));
    if (seen[static_cast<size_t>(id)]) throw Error("frequent_tokens: id " + std::to_string(id) + " repeated");
    seen[static_cast<size_t>(id)] = true;
  }
  frequent_tokens_ = std::move(ids);
  shortlist_ids_ = at::Tensor();
  shortlist_head_ = at::Tensor();
}

void EarlyExits::set_shortlist(const Model& model, int64_t k) {
  shortlist_ids_ = at::Tensor();
  shortlist_head_ = at::Tensor();
  if (k <= 0 || k >= static_cast<int64_t>(frequent_tokens_.size())) return;
  shortlist_ids_ = at::tensor(std::vector<int64_t>(frequent_tokens_.begin(), frequent_tokens_.begin() + k),
                              at::TensorOptions().dtype(at::kLong));
  shortlist_head_ = model.head_rows(std::vector<int64_t>(frequent_tokens_.begin(), frequent_tokens_.begin() + k))
                        .to(at::kHalf)
                        .contiguous();
}

namespace {

// Exit `a`'s adapter on hidden rows x: x + up(silu(down(norm(x)))).
at::Tensor adapt(const ExitAdapter& a, int64_t bottleneck, const ModelConfig& c, const at::Tensor& x) {
  const int64_t m = x.size(0), H = c.hidden_size, B = bottleneck;
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor normed = at::empty({m, H}, f32), mid = at::empty({m, B}, f32), delta = at::empty({m, H}, f32);
  kernels::rms_norm(x.data_ptr<float>(), m, H, a.norm.data_ptr<float>(), static_cast<float>(c.rms_norm_eps),
                    normed.data_ptr<float>());
  kernels::linear(normed.data_ptr<float>(), m, MatrixRef{WType::F32, a.down.data_ptr<float>(), B, H}, mid.data_ptr<float>());
  at::silu_(mid);
  kernels::linear(mid.data_ptr<float>(), m, MatrixRef{WType::F32, a.up.data_ptr<float>(), H, B}, delta.data_ptr<float>());
  return x + delta;
}

}  // namespace

at::Tensor EarlyExits::final_hidden(const Model& model, size_t i, const at::Tensor& hidden) const {
  const ModelConfig& c = model.config();
  const at::Tensor h = adapt(adapters_.at(i), bottleneck_, c, hidden.contiguous());
  at::Tensor normed = at::empty({h.size(0), c.hidden_size}, at::TensorOptions().dtype(at::kFloat));
  kernels::rms_norm(h.data_ptr<float>(), h.size(0), c.hidden_size, model.final_norm(),
                    static_cast<float>(c.rms_norm_eps), normed.data_ptr<float>());
  return normed;
}

at::Tensor EarlyExits::scores(const Model& model, size_t i, const at::Tensor& hidden) const {
  const ModelConfig& c = model.config();
  if (!shortlist_ids_.defined()) return model.head_logits(adapt(adapters_.at(i), bottleneck_, c, hidden.contiguous()));
  const at::Tensor normed = final_hidden(model, i, hidden);
  const int64_t m = normed.size(0), k = shortlist_ids_.numel();
  at::Tensor scored = at::empty({m, k}, at::TensorOptions().dtype(at::kFloat));
  kernels::linear(normed.data_ptr<float>(), m,
                  MatrixRef{WType::F16, shortlist_head_.data_ptr<at::Half>(), k, c.hidden_size}, scored.data_ptr<float>());
  return scored;
}

at::Tensor EarlyExits::logits(const Model& model, size_t i, const at::Tensor& hidden) const {
  const at::Tensor scored = scores(model, i, hidden);
  if (!shortlist_ids_.defined()) return scored;
  at::Tensor out = at::full({scored.size(0), model.config().vocab_size}, -std::numeric_limits<float>::infinity(),
                            at::TensorOptions().dtype(at::kFloat));
  out.index_copy_(1, shortlist_ids_, scored);
  return out;
}

}  // namespace splitspec

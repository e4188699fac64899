#include "common/early_exit/early_exit.h"

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "common/kernels/kernels.h"
#include "common/util/error.h"
#include "common/util/json_integer.h"
#include "common/weights/safetensors.h"
#include "common/model/weight_set.h"

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

EarlyExits::EarlyExits(std::vector<ExitAdapter> adapters, int64_t bottleneck)
    : adapters_(std::move(adapters)), bottleneck_(bottleneck) {
  if (bottleneck < 1) throw Error("exit bottleneck must be at least 1");
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
    return load_float_values(it->second);
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
  std::vector<TensorToWrite> out;
  for (const ExitAdapter& a : adapters_) {
    const int64_t H = static_cast<int64_t>(a.norm.size()), B = bottleneck_;
    for (auto [what, t, shape] : {std::tuple<const char*, const std::vector<float>*, std::vector<int64_t>>{
                                      "norm.weight", &a.norm, {H}},
                                  {"down_proj.weight", &a.down, {B, H}},
                                  {"up_proj.weight", &a.up, {H, B}}})
      out.push_back({tensor_name(a.after_layer, what), DType::F32, shape, t->data(), t->size() * sizeof(float)});
  }
  write_safetensors((fs::path(dir) / "early_exits.safetensors").string(), out, {{"format", "pt"}});
  nlohmann::json j;
  std::vector<int64_t> layers;
  for (const ExitAdapter& a : adapters_) layers.push_back(a.after_layer);
  j["after_layers"] = layers;
  j["bottleneck"] = bottleneck_;
  j["hidden_size"] = adapters_.empty() ? 0 : adapters_[0].norm.size();
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
  for (const ExitAdapter& a : adapters_) n += a.norm.size() + a.down.size() + a.up.size();
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
  shortlist_.reset();
}

void EarlyExits::set_shortlist(const Backend& model, int64_t k) {
  shortlist_.reset();
  if (k <= 0 || k >= static_cast<int64_t>(frequent_tokens_.size())) return;
  std::vector<int32_t> tokens(frequent_tokens_.begin(), frequent_tokens_.begin() + k);
  const Rows rows = model.head_rows(std::vector<int64_t>(tokens.begin(), tokens.end()));
  shortlist_ = std::make_shared<const Shortlist>(std::move(tokens), rows);
}

namespace {

// Exit `a`'s adapter on hidden rows x: x + up(silu(down(norm(x)))).
Rows adapt(const ExitAdapter& a, int64_t bottleneck, const ModelConfig& c, RowsView x) {
  const int64_t m = x.rows, H = c.hidden_size, B = bottleneck;
  Rows normed(m, H), mid(m, B), out(m, H);
  kernels::rms_norm(x.data, m, H, a.norm.data(), static_cast<float>(c.rms_norm_eps), normed.data());
  kernels::linear(normed.data(), m, MatrixRef{WType::F32, a.down.data(), B, H}, mid.data());
  kernels::silu(mid.data(), mid.size(), mid.data());
  kernels::linear(mid.data(), m, MatrixRef{WType::F32, a.up.data(), H, B}, out.data());
  for (int64_t i = 0; i < out.size(); ++i) out.data()[i] += x.data[i];
  return out;
}

}  // namespace

Rows EarlyExits::final_hidden(const Backend& model, size_t i, RowsView hidden) const {
  const ModelConfig& c = model.config();
  const Rows h = adapt(adapters_.at(i), bottleneck_, c, hidden);
  Rows normed(h.rows(), c.hidden_size);
  kernels::rms_norm(h.data(), h.rows(), c.hidden_size, model.final_norm(), static_cast<float>(c.rms_norm_eps),
                    normed.data());
  return normed;
}

Rows EarlyExits::scores(const Backend& model, size_t i, RowsView hidden) const {
  if (!shortlist_) return model.head_logits(adapt(adapters_.at(i), bottleneck_, model.config(), hidden));
  return shortlist_->scores(final_hidden(model, i, hidden));
}

Rows EarlyExits::logits(const Backend& model, size_t i, RowsView hidden) const {
  if (!shortlist_) return scores(model, i, hidden);
  return shortlist_->logits(final_hidden(model, i, hidden), model.config().vocab_size);
}

}  // namespace splitspec

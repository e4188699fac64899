#include "common/model/model_config.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/kernels/kernels.h"
#include "common/util/error.h"
#include "common/model/family.h"
#include "common/model/gguf_model.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace splitspec {

namespace {

template <typename T>
T required(const json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) throw Error(source + ": missing required field '" + key + "'");
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    throw Error(source + ": field '" + key + "' has the wrong type (" + j[key].dump() + ")");
  }
}

int64_t integer(const json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) throw Error(source + ": missing required field '" + key + "'");
  if (!j[key].is_number_integer()) throw Error(source + ": field '" + key + "' must be an integer, got " + j[key].dump());
  return j[key].get<int64_t>();
}

}  // namespace

int64_t ModelConfig::num_parameters() const {
  const int64_t H = hidden_size, P = per_layer_input_size;
  const int64_t delta_rule = H * (ssm_channels() + 2 * ssm_value_dim() + 2 * ssm_value_heads) +
                             ssm_channels() * ssm_conv_kernel + 2 * ssm_value_heads + ssm_head_dim;
  int64_t layers = 0;
  for (int64_t l = 0; l < num_hidden_layers; ++l) {
    const int64_t D = layer_head_dim(l), kv = layer_has_kv(l) ? layer_kv_heads(l) * D : 0;
    const int64_t attn = H * ((attn_output_gate ? 3 : 2) * num_attention_heads * D + (layer_value_is_key(l) ? 1 : 2) * kv);
    const int64_t norms = (post_norms ? 4 : 2) * H + (qk_norm ? 2 * D : 0) +
                          (attention_bias ? num_attention_heads * D + 2 * kv : 0);
    const int64_t per_layer = P > 0 ? 2 * H * P + H : 0;
    layers += (layer_is_recurrent(l) ? delta_rule : attn) + 3 * H * layer_intermediate_size(l) + norms + per_layer +
              (layer_output_scale ? 1 : 0);
  }
  const int64_t emb = vocab_size * H;
  const int64_t per_layer_embed = P > 0 ? (vocab_size + H) * num_hidden_layers * P + P : 0;
  return layers + H + emb * (tie_word_embeddings ? 1 : 2) + per_layer_embed;
}

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](int64_t v, const char* name) {
    if (v <= 0) throw Error(source + ": '" + name + "' must be positive, got " + std::to_string(v));
  };
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(vocab_size, "vocab_size");
  positive(max_position_embeddings, "max_position_embeddings");
  if (num_attention_heads % num_key_value_heads != 0)
    throw Error(source + ": num_attention_heads (" + std::to_string(num_attention_heads) +
                ") must be a multiple of num_key_value_heads (" + std::to_string(num_key_value_heads) + ")");
  if (head_dim % 2 != 0) throw Error(source + ": head_dim must be even for rotary embeddings");
  if (head_dim > kernels::kMaxHeadDim)
    throw Error(source + ": head_dim " + std::to_string(head_dim) + " exceeds the supported " +
                std::to_string(kernels::kMaxHeadDim));
  if (!(rms_norm_eps > 0)) throw Error(source + ": 'rms_norm_eps' must be positive");
  if (!(rope_theta > 0)) throw Error(source + ": 'rope_theta' must be positive");
  if (bos_token_id < -1 || bos_token_id >= vocab_size)
    throw Error(source + ": bos_token_id " + std::to_string(bos_token_id) + " outside the vocabulary");
  for (int64_t id : eos_token_ids)
    if (id < 0 || id >= vocab_size) throw Error(source + ": eos_token_id " + std::to_string(id) + " outside the vocabulary");
  if (eos_token_id < -1 || eos_token_id >= vocab_size)
    throw Error(source + ": eos_token_id " + std::to_string(eos_token_id) + " outside the vocabulary");
  if (!recurrent_layers.empty()) {
    if (static_cast<int64_t>(recurrent_layers.size()) != num_hidden_layers)
      throw Error(source + ": " + std::to_string(recurrent_layers.size()) + " layer kinds for " +
                  std::to_string(num_hidden_layers) + " layers");
    if (has_recurrent_layers()) {
      positive(ssm_conv_kernel, "linear_conv_kernel_dim");
      positive(ssm_key_heads, "linear_num_key_heads");
      positive(ssm_value_heads, "linear_num_value_heads");
      positive(ssm_head_dim, "linear_key_head_dim");
      if (ssm_value_heads % ssm_key_heads != 0)
        throw Error(source + ": linear_num_value_heads (" + std::to_string(ssm_value_heads) +
                    ") must be a multiple of linear_num_key_heads (" + std::to_string(ssm_key_heads) + ")");
      if (ssm_head_dim > kernels::kMaxHeadDim)
        throw Error(source + ": a delta-rule head of " + std::to_string(ssm_head_dim) + " exceeds the supported " +
                    std::to_string(kernels::kMaxHeadDim));
    }
  }
  if (rotary_dim < 0 || rotary_dim > head_dim || rotary_dim % 2 != 0)
    throw Error(source + ": rotary size " + std::to_string(rotary_dim) + " must be even and at most head_dim " +
                std::to_string(head_dim));
  for (const std::vector<float>* factors : {&rope_freq_factors, &rope_short_factors, &rope_long_factors}) {
    if (!factors->empty() && static_cast<int64_t>(factors->size()) != rotary_dims() / 2)
      throw Error(source + ": " + std::to_string(factors->size()) + " RoPE frequency factors for a rotary size of " +
                  std::to_string(rotary_dims()));
    for (float f : *factors)
      if (!(f > 0) || !std::isfinite(f)) throw Error(source + ": RoPE frequency factors must be positive and finite");
  }
  if (rope_short_factors.size() != rope_long_factors.size())
    throw Error(source + ": LongRoPE needs as many short factors as long ones");
  if (!rope_long_factors.empty() && rope_original_context <= 0)
    throw Error(source + ": LongRoPE needs the original context length");
  if (!(rope_attention_factor > 0) || !std::isfinite(rope_attention_factor))
    throw Error(source + ": the RoPE attention factor must be positive");
  if (sliding_window_pattern < 0 || (sliding_window_pattern > 0 && sliding_window <= 0))
    throw Error(source + ": interleaved sliding-window layers need a positive sliding_window");
  if (!(rope_local_theta > 0)) throw Error(source + ": the local RoPE base must be positive");
  if (query_pre_attn_scalar < 0 || !std::isfinite(query_pre_attn_scalar))
    throw Error(source + ": 'query_pre_attn_scalar' must be positive");
  if (local_head_dim < 0 || local_head_dim % 2 != 0 || local_head_dim > kernels::kMaxHeadDim)
    throw Error(source + ": the local layers' head size " + std::to_string(local_head_dim) +
                " must be even and at most " + std::to_string(kernels::kMaxHeadDim));
  if (local_kv_heads < 0 || (local_kv_heads > 0 && num_attention_heads % local_kv_heads != 0))
    throw Error(source + ": the local layers' key-value heads must divide the attention heads");
  if (local_rotary_dim < 0 || local_rotary_dim % 2 != 0 ||
      local_rotary_dim > (local_head_dim > 0 ? local_head_dim : head_dim))
    throw Error(source + ": the local layers' rotary size must be even and at most their head size");
  if (!layer_intermediate_sizes.empty()) {
    if (static_cast<int64_t>(layer_intermediate_sizes.size()) != num_hidden_layers)
      throw Error(source + ": " + std::to_string(layer_intermediate_sizes.size()) + " MLP widths for " +
                  std::to_string(num_hidden_layers) + " layers");
    for (int64_t i : layer_intermediate_sizes) positive(i, "feed_forward_length");
  }
  if (!value_is_key_layers.empty() && static_cast<int64_t>(value_is_key_layers.size()) != num_hidden_layers)
    throw Error(source + ": value-is-key flags for " + std::to_string(value_is_key_layers.size()) + " of " +
                std::to_string(num_hidden_layers) + " layers");
  if (shared_kv_layers < 0 || shared_kv_layers >= num_hidden_layers)
    throw Error(source + ": " + std::to_string(shared_kv_layers) + " layers sharing keys and values of " +
                std::to_string(num_hidden_layers));
  for (int64_t l = num_hidden_layers - shared_kv_layers; l < num_hidden_layers; ++l) {
    const int64_t from = kv_source_layer(l);
    if (from < 0 || layer_is_sliding(from) != layer_is_sliding(l) || layer_is_recurrent(from) || layer_is_recurrent(l))
      throw Error(source + ": layer " + std::to_string(l) + " would share the keys and values of layer " +
                  std::to_string(from) + ", which is not an attention layer of its kind");
  }
  if (per_layer_input_size < 0) throw Error(source + ": the per-layer input size must not be negative");
  if (final_logit_softcap < 0 || !std::isfinite(final_logit_softcap))
    throw Error(source + ": the final logit soft cap must be positive (or 0 for none)");
}

namespace {

// The family and Hugging Face architecture config.json names.
std::pair<const Family*, const HfArchitecture*> family_of(const json& j, const std::string& source) {
  std::string arch, type;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty()) {
    if (j["architectures"].size() != 1 || !j["architectures"][0].is_string())
      throw Error(source + ": 'architectures' must name one architecture, got " + j["architectures"].dump());
    arch = j["architectures"][0].get<std::string>();
  }
  if (j.contains("model_type") && j["model_type"].is_string()) type = j["model_type"].get<std::string>();
  const std::vector<const Family*> all = families();
  // Our own configs (the trainer's, the benchmarks') name no architecture.
  if (arch.empty() && type.empty()) return {all[0], &all[0]->hf[0]};
  std::string supported;
  for (const Family* f : all)
    for (const HfArchitecture& h : f->hf) {
      if ((!arch.empty() && arch == h.name) || (arch.empty() && type == h.model_type)) return {f, &h};
      supported += (supported.empty() ? "" : ", ") + h.name;
    }
  const std::string what = !arch.empty() ? "architecture \"" + arch + "\"" : "model_type \"" + type + "\"";
  throw Error(source + ": unsupported " + what + "; SplitSpec runs " + supported);
}

// Every id of an "eos_token_id" that may be one id or a list.
std::vector<int64_t> token_ids(const json& j, const char* key, int64_t fallback, const std::string& source) {
  if (!j.contains(key)) return fallback >= 0 ? std::vector<int64_t>{fallback} : std::vector<int64_t>{};
  if (j[key].is_null()) return {};
  if (j[key].is_array()) {
    std::vector<int64_t> out;
    for (const auto& v : j[key]) {
      if (!v.is_number_integer()) throw Error(source + ": field '" + key + "' must hold integers, got " + j[key].dump());
      out.push_back(v.get<int64_t>());
    }
    return out;
  }
  return {integer(j, key, source)};
}

std::vector<float> float_list(const json& r, const char* key, size_t size, const std::string& source) {
  if (!r.contains(key) || !r[key].is_array() || r[key].size() != size)
    throw Error(source + ": rope_scaling needs '" + key + "' with " + std::to_string(size) + " numbers");
  std::vector<float> out;
  for (const auto& v : r[key]) {
    if (!v.is_number()) throw Error(source + ": rope_scaling '" + key + "' must hold numbers");
    out.push_back(v.get<float>());
  }
  return out;
}

// LongRoPE's factors and attention factor: Hugging Face's
// _compute_longrope_parameters, as llama.cpp's converter writes them.
void longrope(const json& j, const json& r, ModelConfig& c, const std::string& source) {
  for (const char* key : {"short_mscale", "long_mscale"})
    if (r.contains(key)) throw Error(source + ": LongRoPE with '" + key + "' is not supported");
  const size_t n = static_cast<size_t>(c.rotary_dims() / 2);
  c.rope_short_factors = float_list(r, "short_factor", n, source);
  c.rope_long_factors = float_list(r, "long_factor", n, source);
  c.rope_original_context = config_integer(j, "original_max_position_embeddings", 0, source);
  if (r.contains("original_max_position_embeddings"))
    c.rope_original_context = integer(r, "original_max_position_embeddings", source);
  if (c.rope_original_context <= 0)
    throw Error(source + ": LongRoPE needs 'original_max_position_embeddings'");
  if (r.contains("attention_factor") && !r["attention_factor"].is_null()) {
    c.rope_attention_factor = config_number(r, "attention_factor", 1.0, source);
  } else {
    const double scale = static_cast<double>(c.max_position_embeddings) / static_cast<double>(c.rope_original_context);
    c.rope_attention_factor =
        scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(c.rope_original_context))) : 1.0;
  }
}

std::vector<float> rope_factors(const json& r, const ModelConfig& c, const std::string& source) {
  if (!r.is_object()) throw Error(source + ": 'rope_scaling' must be an object or null");
  std::string type = r.value("rope_type", r.value("type", std::string("default")));
  if (type == "default") return {};
  auto num = [&](const char* key) {
    if (!r.contains(key) || !r[key].is_number()) throw Error(source + ": rope_scaling of type '" + type + "' needs a number '" + key + "'");
    return r[key].get<double>();
  };
  if (type == "linear") return std::vector<float>(static_cast<size_t>(c.head_dim / 2), static_cast<float>(num("factor")));
  if (type == "llama3")
    return llama3_rope_factors(c.rope_theta, c.head_dim, num("factor"), num("low_freq_factor"), num("high_freq_factor"),
                               static_cast<int64_t>(num("original_max_position_embeddings")));
  throw Error(source + ": rope_scaling type '" + type + "' is not supported (llama3, linear and none are)");
}

}  // namespace

int64_t config_integer(const json& j, const char* key, int64_t fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return integer(j, key, source);
}

double config_number(const json& j, const char* key, double fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) throw Error(source + ": field '" + key + "' must be a number, got " + j[key].dump());
  return j[key].get<double>();
}

std::vector<float> llama3_rope_factors(double theta, int64_t head_dim, double factor, double low_freq_factor,
                                       double high_freq_factor, int64_t original_context) {
  const double pi = 3.14159265358979323846;
  const double low_wavelen = original_context / low_freq_factor, high_wavelen = original_context / high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double wavelen = 2 * pi / inv_freq;
    double divisor = 1.0;
    if (wavelen > low_wavelen) {
      divisor = factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      divisor = 1.0 / ((1 - smooth) / factor + smooth);
    }
    out.push_back(static_cast<float>(divisor));
  }
  return out;
}

bool is_end_of_generation(const ModelConfig& c, int64_t token) {
  if (token == c.eos_token_id) return true;
  for (int64_t id : c.eos_token_ids)
    if (id == token) return true;
  return false;
}

int64_t model_context_limit() {
  if (const char* env = std::getenv("SPLITSPEC_MAX_CONTEXT")) {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (end == env || *end != '\0' || v <= 0) throw Error(std::string("SPLITSPEC_MAX_CONTEXT=") + env + ": expected a positive integer");
    return v;
  }
  return 4096;
}

void apply_context_limit(ModelConfig& c) {
  const int64_t limit = model_context_limit();
  if (c.max_position_embeddings > limit) {
    if (c.declared_context == 0) c.declared_context = c.max_position_embeddings;
    c.max_position_embeddings = limit;
  }
}

ModelConfig parse_model_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(source + ": expected a JSON object");
  const auto [family, hf] = family_of(j, source);
  // A multimodal checkpoint's text model (Qwen3.5's): text_config's keys,
  // the top level's where it lacks them.
  if (j.contains("text_config") && j["text_config"].is_object()) {
    json text = j["text_config"];
    for (const auto& [key, value] : j.items())
      if (key != "text_config" && key != "vision_config" && !text.contains(key)) text[key] = value;
    j = std::move(text);
  }
  // Anything below would load and silently compute another function.
  const json act_json = j.contains("hidden_activation") && !j["hidden_activation"].is_null()
                            ? j["hidden_activation"]
                            : j.value("hidden_act", json(family->hf_default_act));
  const std::string act = act_json.dump();
  ModelConfig c;
  if (act == "\"silu\"") {
    c.activation = Activation::kSilu;
  } else if (act == "\"gelu_pytorch_tanh\"" || act == "\"gelu_tanh\"") {
    c.activation = Activation::kGeluTanh;
  } else {
    throw Error(source + ": unsupported hidden_act " + act + " (silu and gelu_pytorch_tanh are)");
  }
  if (j.contains("mlp_bias") && j["mlp_bias"] == true) throw Error(source + ": 'mlp_bias' = true is not supported");
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (j.contains(key) && !j[key].is_null()) throw Error(source + ": '" + key + "' is not supported");

  c.architecture = family->name;
  c.hidden_size = integer(j, "hidden_size", source);
  c.intermediate_size = integer(j, "intermediate_size", source);
  c.num_hidden_layers = integer(j, "num_hidden_layers", source);
  c.num_attention_heads = integer(j, "num_attention_heads", source);
  c.num_key_value_heads = config_integer(j, "num_key_value_heads", c.num_attention_heads, source);
  c.vocab_size = integer(j, "vocab_size", source);
  c.rms_norm_eps = config_number(j, "rms_norm_eps", hf->rms_norm_eps, source);
  c.rope_theta = config_number(j, "rope_theta", hf->rope_theta, source);
  c.max_position_embeddings = config_integer(j, "max_position_embeddings", hf->max_positions, source);
  c.tie_word_embeddings = hf->tied;
  if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_null())
    c.tie_word_embeddings = required<bool>(j, "tie_word_embeddings", source);
  const std::vector<int64_t> bos = token_ids(j, "bos_token_id", hf->bos, source);
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  c.eos_token_ids = token_ids(j, "eos_token_id", hf->eos, source);
  c.eos_token_id = c.eos_token_ids.empty() ? -1 : c.eos_token_ids[0];
  if (c.num_attention_heads <= 0) throw Error(source + ": 'num_attention_heads' must be positive");
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = integer(j, "head_dim", source);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      throw Error(source + ": hidden_size must be divisible by num_attention_heads");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  const double partial = config_number(j, "partial_rotary_factor", 1.0, source);
  if (partial != 1.0) {
    c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);
    if (!(partial > 0.0 && partial < 1.0) || c.rotary_dim <= 0 || c.rotary_dim % 2 != 0)
      throw Error(source + ": partial_rotary_factor " + std::to_string(partial) + " gives no even rotary size");
  }
  const bool bias = j.contains("attention_bias") && j["attention_bias"] == true;
  c.qk_norm = family->qk_norm;
  switch (family->hf_attention_bias) {
    case HfAttentionBias::kAlways: c.attention_bias = true; break;
    case HfAttentionBias::kAsConfigured: c.attention_bias = bias; break;
    case HfAttentionBias::kRefused:
      if (bias) throw Error(source + ": 'attention_bias' = true is not supported for " + c.architecture);
      break;
  }
  if (family->read_hf) family->read_hf(j, c, source);
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& r = j["rope_scaling"];
    const std::string type = r.is_object() ? r.value("rope_type", r.value("type", std::string())) : std::string();
    if (type == "longrope" || type == "su") {
      longrope(j, r, c, source);
    } else {
      c.rope_freq_factors = rope_factors(r, c, source);
    }
    if (!c.rope_freq_factors.empty() || !c.rope_long_factors.empty()) c.rope_scaling_json = r.dump();
  }
  // Past its window a sliding-window model attends differently; within it,
  // as every other. Phi-3 mini's is 2047. Gemma 3 masks its local layers.
  const bool sliding = !j.contains("use_sliding_window") || j["use_sliding_window"] == true;
  if (sliding && j.contains("sliding_window") && j["sliding_window"].is_number_integer()) {
    const int64_t window = j["sliding_window"].get<int64_t>();
    if (window > 0) c.sliding_window = window;
  }
  if (c.sliding_window > 0 && c.sliding_window < c.max_position_embeddings && c.sliding_window_pattern == 0) {
    c.declared_context = c.max_position_embeddings;
    c.max_position_embeddings = c.sliding_window;
  }
  if (j.contains("splitspec_rope_freq_factors") && j["splitspec_rope_freq_factors"].is_array()) {
    c.rope_freq_factors.clear();
    for (const auto& v : j["splitspec_rope_freq_factors"]) {
      if (!v.is_number()) throw Error(source + ": 'splitspec_rope_freq_factors' must hold numbers");
      c.rope_freq_factors.push_back(v.get<float>());
    }
  }
  c.validate(source);
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  if (fs::is_regular_file(path) && is_gguf_file(path)) return gguf_model_config(GgufFile(path));
  fs::path p(path);
  if (fs::is_directory(p)) p /= "config.json";
  std::ifstream in(p);
  if (!in) throw Error(p.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), p.string());
}

std::string model_config_to_json(const ModelConfig& c) {
  const Family& family = family_of(c);
  json j = {
      {"architectures", {family.hf[0].name}},
      {"model_type", family.hf[0].model_type},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"vocab_size", c.vocab_size},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"max_position_embeddings", c.declared_context > 0 ? c.declared_context : c.max_position_embeddings},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"hidden_act", c.activation == Activation::kGeluTanh ? "gelu_pytorch_tanh" : "silu"},
      {"rope_scaling", nullptr},
  };
  if (family.write_hf) family.write_hf(c, j);
  if (c.rotary_dim > 0) j["partial_rotary_factor"] = static_cast<double>(c.rotary_dim) / static_cast<double>(c.head_dim);
  j["bos_token_id"] = c.bos_token_id >= 0 ? json(c.bos_token_id) : json(nullptr);
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  else j["eos_token_id"] = c.eos_token_id >= 0 ? json(c.eos_token_id) : json(nullptr);
  if (family.hf_attention_bias == HfAttentionBias::kAsConfigured) j["attention_bias"] = c.attention_bias;
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (!c.rope_long_factors.empty()) {
    // LongRoPE as Hugging Face names it, whether it came from there or from a
    // GGUF file's rope_factors_long/short.
    j["rope_scaling"] = {{"type", "longrope"},
                         {"short_factor", c.rope_short_factors},
                         {"long_factor", c.rope_long_factors},
                         {"attention_factor", c.rope_attention_factor}};
    j["original_max_position_embeddings"] = c.rope_original_context;
  } else if (!c.rope_scaling_json.empty()) {
    j["rope_scaling"] = json::parse(c.rope_scaling_json);
  } else if (!c.rope_freq_factors.empty()) {
    // Divisors read from a GGUF file's rope_freqs: no Hugging Face key holds
    // them as they are.
    j["splitspec_rope_freq_factors"] = c.rope_freq_factors;
  }
  return j.dump(2) + "\n";
}

}  // namespace splitspec

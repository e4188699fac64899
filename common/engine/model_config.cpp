#include "common/engine/model_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/util/error.h"
#include "common/engine/kernels.h"

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

// Llama configs sometimes carry a list of EOS ids; the first is the one we stop on.
int64_t token_id(const json& j, const char* key, const std::string& source) {
  if (j.contains(key) && j[key].is_array() && !j[key].empty() && j[key][0].is_number_integer())
    return j[key][0].get<int64_t>();
  return integer(j, key, source);
}

}  // namespace

int64_t ModelConfig::num_parameters() const {
  const int64_t attn = hidden_size * head_dim * (2 * num_attention_heads + 2 * num_key_value_heads);
  const int64_t mlp = 3 * hidden_size * intermediate_size;
  const int64_t norms = 2 * hidden_size;
  const int64_t emb = vocab_size * hidden_size;
  return num_hidden_layers * (attn + mlp + norms) + hidden_size + emb * (tie_word_embeddings ? 1 : 2);
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
  if (bos_token_id < 0 || bos_token_id >= vocab_size)
    throw Error(source + ": bos_token_id " + std::to_string(bos_token_id) + " outside the vocabulary");
  if (eos_token_id < 0 || eos_token_id >= vocab_size)
    throw Error(source + ": eos_token_id " + std::to_string(eos_token_id) + " outside the vocabulary");
}

ModelConfig parse_model_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(source + ": expected a JSON object");
  // Only the plain LLaMA architecture is implemented; anything else would load
  // and silently compute the wrong function.
  if (j.contains("architectures") && j["architectures"].is_array()) {
    for (const auto& a : j["architectures"]) {
      if (a != "LlamaForCausalLM")
        throw Error(source + ": unsupported architecture " + a.dump() + " (only LlamaForCausalLM)");
    }
  }
  if (j.contains("model_type") && j["model_type"] != "llama")
    throw Error(source + ": unsupported model_type " + j["model_type"].dump() + " (only \"llama\")");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    throw Error(source + ": unsupported hidden_act " + j["hidden_act"].dump() + " (only \"silu\")");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    throw Error(source + ": rope_scaling is not supported");
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (j.contains(bias) && j[bias] == true) throw Error(source + ": '" + bias + "' = true is not supported");

  ModelConfig c;
  c.hidden_size = integer(j, "hidden_size", source);
  c.intermediate_size = integer(j, "intermediate_size", source);
  c.num_hidden_layers = integer(j, "num_hidden_layers", source);
  c.num_attention_heads = integer(j, "num_attention_heads", source);
  c.num_key_value_heads = integer(j, "num_key_value_heads", source);
  c.vocab_size = integer(j, "vocab_size", source);
  c.rms_norm_eps = required<double>(j, "rms_norm_eps", source);
  c.rope_theta = required<double>(j, "rope_theta", source);
  c.max_position_embeddings = integer(j, "max_position_embeddings", source);
  c.tie_word_embeddings = required<bool>(j, "tie_word_embeddings", source);
  c.bos_token_id = token_id(j, "bos_token_id", source);
  c.eos_token_id = token_id(j, "eos_token_id", source);
  if (c.num_attention_heads <= 0) throw Error(source + ": 'num_attention_heads' must be positive");
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = integer(j, "head_dim", source);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      throw Error(source + ": hidden_size must be divisible by num_attention_heads");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.validate(source);
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  fs::path p(path);
  if (fs::is_directory(p)) p /= "config.json";
  std::ifstream in(p);
  if (!in) throw Error(p.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), p.string());
}

std::string model_config_to_json(const ModelConfig& c) {
  json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"vocab_size", c.vocab_size},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"max_position_embeddings", c.max_position_embeddings},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"bos_token_id", c.bos_token_id},
      {"eos_token_id", c.eos_token_id},
      {"hidden_act", "silu"},
      {"rope_scaling", nullptr},
  };
  return j.dump(2) + "\n";
}

}  // namespace splitspec

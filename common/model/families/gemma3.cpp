// Gemma 3 (text): GeGLU, the embedding rows times sqrt(hidden), RMSNorms on
// the attention's and the MLP's outputs, per-head query and key norms, its
// own query scale, and interleaved local (sliding-window, their own RoPE
// base) and global layers. Its Hugging Face files hold norm gains less 1 and
// name two norms otherwise; llama.cpp's loader (src/models/gemma3.cpp)
// computes the query scale itself and reads linear RoPE scaling as a factor.
// Its models' files name the built-in gemma template (and SentencePiece).
#include <nlohmann/json.hpp>

#include "common/model/family.h"
#include "common/model/gguf_model.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

using nlohmann::json;

// GeGLU, the embedding scale, the post norms, the query scale and the
// interleaved local layers (sliding_window_pattern, or the layer_types list
// newer configs give instead; every pattern-th layer global).
void read_hf(const json& j, ModelConfig& c, const std::string& source) {
  c.scale_embeddings = true;
  c.post_norms = true;
  c.query_pre_attn_scalar = config_number(j, "query_pre_attn_scalar", static_cast<double>(c.head_dim), source);
  if (!(c.query_pre_attn_scalar > 0)) throw Error(source + ": 'query_pre_attn_scalar' must be positive");
  c.rope_local_theta = config_number(j, "rope_local_base_freq", 10000.0, source);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& rp = j["rope_parameters"];
    if (rp.contains("full_attention")) c.rope_theta = config_number(rp["full_attention"], "rope_theta", c.rope_theta, source);
    if (rp.contains("sliding_attention"))
      c.rope_local_theta = config_number(rp["sliding_attention"], "rope_theta", c.rope_local_theta, source);
  }
  int64_t pattern = config_integer(j, "sliding_window_pattern", 6, source);
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const json& types = j["layer_types"];
    if (static_cast<int64_t>(types.size()) != c.num_hidden_layers)
      throw Error(source + ": 'layer_types' lists " + std::to_string(types.size()) + " layers of " +
                  std::to_string(c.num_hidden_layers));
    pattern = 0;
    for (size_t i = 0; i < types.size() && pattern == 0; ++i)
      if (types[i] == "full_attention") pattern = static_cast<int64_t>(i) + 1;
    if (pattern == 0) pattern = c.num_hidden_layers + 1;  // every layer local
    for (size_t i = 0; i < types.size(); ++i) {
      const bool full = static_cast<int64_t>(i) % pattern == pattern - 1;
      if (types[i] != (full ? "full_attention" : "sliding_attention"))
        throw Error(source + ": 'layer_types' is not every " + std::to_string(pattern) +
                    "th layer global (layer " + std::to_string(i) + " is " + types[i].dump() + ")");
    }
  }
  if (pattern <= 0) throw Error(source + ": 'sliding_window_pattern' must be positive");
  c.sliding_window_pattern = pattern;
  if (!j.contains("sliding_window") || !j["sliding_window"].is_number_integer() || j["sliding_window"].get<int64_t>() <= 0)
    throw Error(source + ": a gemma3 model needs a positive 'sliding_window'");
}

void write_hf(const ModelConfig& c, json& j) {
  j["query_pre_attn_scalar"] = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<double>(c.head_dim);
  j["rope_local_base_freq"] = c.rope_local_theta;
  j["sliding_window_pattern"] = c.sliding_window_pattern;
}

// As llama.cpp's loader reads it: every 6th layer global unless
// attention.sliding_window_pattern says otherwise (as a period or a
// per-layer list), rope.freq_base_swa, and the query scale 1 / sqrt(head_dim)
// (the 62-layer 27B's 1 / sqrt(hidden / heads)).
void read_gguf(const GgufFile& f, ModelConfig& c) {
  const std::string& path = f.path();
  const std::string k = "gemma3.";
  if (f.has(k + "final_logit_softcapping") && gguf_number(f, k + "final_logit_softcapping", 0.0) != 0.0)
    throw Error(path + ": a final logit soft cap (" + k + "final_logit_softcapping) is not supported");
  c.activation = Activation::kGeluTanh;
  c.scale_embeddings = true;
  c.post_norms = true;
  c.query_pre_attn_scalar = c.num_hidden_layers == 62 ? static_cast<double>(c.hidden_size / c.num_attention_heads)
                                                      : static_cast<double>(c.head_dim);
  c.rope_local_theta = gguf_number(f, k + "rope.freq_base_swa", 10000.0);
  if (!f.has(k + "attention.sliding_window") || gguf_u32(f, k + "attention.sliding_window") == 0) return;
  c.sliding_window_pattern = gguf_sliding_pattern(f, k + "attention.sliding_window_pattern", c.num_hidden_layers, 6);
}

void write_gguf(const ModelConfig& c, GgufWriter& g, const std::string& name) {
  const std::string a = "gemma3.";
  // llama.cpp takes every 6th layer global without this key; the query scale
  // it computes itself (read_gguf).
  if (c.sliding_window_pattern > 0)
    g.add_u32(a + "attention.sliding_window_pattern", static_cast<uint32_t>(c.sliding_window_pattern));
  g.add_f32(a + "rope.freq_base_swa", static_cast<float>(c.rope_local_theta));
  if (c.query_pre_attn_scalar > 0 && c.query_pre_attn_scalar != static_cast<double>(c.head_dim) &&
      !(c.num_hidden_layers == 62 && c.query_pre_attn_scalar == static_cast<double>(c.hidden_size / c.num_attention_heads)))
    throw Error(name + ": query_pre_attn_scalar " + std::to_string(c.query_pre_attn_scalar) +
                " is not the head size, which llama.cpp's gemma3 assumes");
}

}  // namespace

Family gemma3_family() {
  Family f;
  f.name = "gemma3";
  f.hf = {{"Gemma3ForCausalLM", "gemma3_text", 1e-6, 131072, 2, 1, true, 1000000.0}};
  f.hf_default_act = "gelu_pytorch_tanh";
  f.qk_norm = true;
  f.gguf_names = {{"post_attention_norm.weight", "post_attention_norm.weight"},
                  {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"}};
  // There post_attention_layernorm is the norm on the attention's output
  // (ours post_attention_norm), and pre_feedforward_layernorm the MLP's
  // input norm (ours post_attention_layernorm).
  f.hf_names = {{"post_attention_layernorm.weight", "pre_feedforward_layernorm.weight"},
                {"post_attention_norm.weight", "post_attention_layernorm.weight"}};
  f.hf_gains_less_one = true;
  f.gguf_linear_rope_scaling = true;
  f.read_hf = read_hf;
  f.write_hf = write_hf;
  f.read_gguf = read_gguf;
  f.write_gguf = write_gguf;
  return f;
}

}  // namespace splitspec

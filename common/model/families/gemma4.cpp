// Gemma 4 (dense): Gemma 3's layers (GeGLU, the embedding times
// sqrt(hidden), norms on each branch's output, per-head query and key norms,
// interleaved local and global layers) with
// - global layers of wider heads (key_length; the local ones key_length_swa)
//   and their own key-value heads, RoPE on a quarter of their pairs
//   (rope_freqs: 1e30 divisors for the rest);
// - values RMS-normed without a gain, and global layers whose value is
//   their key's projection (no attn_v);
// - the last shared_kv_layers layers computing queries only, over the keys
//   and values of the last layer of their kind that has its own;
// - per-layer inputs (E2B, E4B): a second embedding's row per token and
//   layer, mixed with a projection of the embedding, gated into each layer's
//   output;
// - a learned scale on every layer's output, a query scale of 1, and
//   soft-capped logits.
//
// Read as llama.cpp's loader reads it (src/models/gemma4.cpp). Its norm gains
// are stored as they are applied. The mixture-of-experts models (26B-A4B) are
// refused by name, and so are its Hugging Face directories (nested configs,
// per-layer overrides), naming the conversion that reads them.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/model/family.h"
#include "common/model/gguf_model.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

// The value every layer of one kind (local or global) gives, checked alike.
int64_t per_kind(const ModelConfig& c, const std::vector<int64_t>& values, bool local, const std::string& what) {
  int64_t out = -1;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_is_sliding(l) != local) continue;
    const int64_t v = values[static_cast<size_t>(l)];
    if (out >= 0 && v != out) throw Error(what + " differs between layers of one kind");
    out = v;
  }
  return out;
}

void read_gemma4_gguf(const GgufFile& f, ModelConfig& c) {
  const std::string& path = f.path();
  const std::string k = "gemma4.";
  if (gguf_u32(f, k + "expert_count", 0) > 0 || f.tensor("blk.0.ffn_gate_inp.weight"))
    throw Error(path + ": Gemma 4's mixture-of-experts models (26B-A4B) are not supported; its dense ones are");
  const int64_t L = c.num_hidden_layers;
  c.activation = Activation::kGeluTanh;
  c.scale_embeddings = true;
  c.post_norms = true;
  c.value_norm = true;
  c.query_pre_attn_scalar = 1.0;
  c.rope_local_theta = gguf_number(f, k + "rope.freq_base_swa", 10000.0);
  c.final_logit_softcap = gguf_number(f, k + "final_logit_softcapping", 0.0);
  c.sliding_window_pattern = gguf_sliding_pattern(f, k + "attention.sliding_window_pattern", L, 0);
  c.sliding_window = gguf_u32(f, k + "attention.sliding_window", 0);
  if (c.sliding_window_pattern > 0 && c.sliding_window <= 0)
    throw Error(path + ": local layers need a positive " + k + "attention.sliding_window");

  const std::vector<int64_t> kv = gguf_counts(f, k + "attention.head_count_kv", L,
                                              static_cast<uint32_t>(c.num_attention_heads));
  const std::vector<int64_t> widths = gguf_counts(f, k + "feed_forward_length", L);
  c.num_key_value_heads = std::max<int64_t>(per_kind(c, kv, false, path + ": " + k + "attention.head_count_kv"), 0);
  if (c.num_key_value_heads == 0) c.num_key_value_heads = kv.front();  // every layer local
  c.local_kv_heads = std::max<int64_t>(per_kind(c, kv, true, path + ": " + k + "attention.head_count_kv"), 0);
  if (std::count(widths.begin(), widths.end(), widths.front()) != L) c.layer_intermediate_sizes = widths;
  c.local_head_dim = gguf_u32(f, k + "attention.key_length_swa", static_cast<uint32_t>(c.head_dim));
  if (gguf_u32(f, k + "attention.value_length_swa", static_cast<uint32_t>(c.local_head_dim)) != c.local_head_dim)
    throw Error(path + ": key and value heads of different sizes are not supported");
  c.local_rotary_dim = gguf_u32(f, k + "rope.dimension_count_swa", static_cast<uint32_t>(c.rotary_dims()));
  // 0 where the global layers' value stands (ModelConfig's fallbacks).
  if (c.local_head_dim == c.head_dim) c.local_head_dim = 0;
  if (c.local_rotary_dim == (c.local_head_dim > 0 ? c.local_head_dim : c.rotary_dims())) c.local_rotary_dim = 0;
  if (c.local_kv_heads == c.num_key_value_heads) c.local_kv_heads = 0;

  c.shared_kv_layers = gguf_u32(f, k + "attention.shared_kv_layers", 0);
  if (c.shared_kv_layers >= L) throw Error(path + ": " + k + "attention.shared_kv_layers leaves no layer its own keys");
  c.per_layer_input_size = gguf_u32(f, k + "embedding_length_per_layer_input", 0);
  c.layer_output_scale = f.tensor("blk.0.layer_output_scale.weight") != nullptr;
  c.value_is_key_layers.assign(static_cast<size_t>(L), 0);
  for (int64_t l = 0; l < L - c.shared_kv_layers; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    if (f.tensor(blk + "attn_qkv.weight"))
      throw Error(path + ": a fused " + blk + "attn_qkv.weight is not supported; write q, k and v apart");
    c.value_is_key_layers[static_cast<size_t>(l)] = f.tensor(blk + "attn_v.weight") == nullptr;
  }
  if (std::none_of(c.value_is_key_layers.begin(), c.value_is_key_layers.end(), [](uint8_t v) { return v != 0; }))
    c.value_is_key_layers.clear();
}

// As convert_hf_to_gguf.py writes them; the per-layer counts, the
// per-layer inputs' tensors and the absent value and key matrices are the
// common writer's.
void write_gemma4_gguf(const ModelConfig& c, GgufWriter& g, const std::string&) {
  const std::string k = "gemma4.";
  g.add_u32(k + "attention.key_length_swa", static_cast<uint32_t>(c.local_head_dim > 0 ? c.local_head_dim : c.head_dim));
  g.add_u32(k + "attention.value_length_swa", static_cast<uint32_t>(c.local_head_dim > 0 ? c.local_head_dim : c.head_dim));
  g.add_u32(k + "rope.dimension_count_swa", static_cast<uint32_t>(c.local_rotary_dims()));
  g.add_f32(k + "rope.freq_base_swa", static_cast<float>(c.rope_local_theta));
  GgufValue local;
  local.type = GgufType::kArray;
  local.elem = GgufType::kBool;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) local.nums.push_back(c.layer_is_sliding(l) ? 1 : 0);
  g.add_value(k + "attention.sliding_window_pattern", local);
  g.add_u32(k + "attention.shared_kv_layers", static_cast<uint32_t>(c.shared_kv_layers));
  g.add_u32(k + "embedding_length_per_layer_input", static_cast<uint32_t>(c.per_layer_input_size));
  if (c.final_logit_softcap > 0) g.add_f32(k + "final_logit_softcapping", static_cast<float>(c.final_logit_softcap));
}

void refuse_gemma4_hf(const nlohmann::json&, ModelConfig&, const std::string& source) {
  throw Error(source + ": Gemma 4's Hugging Face directories are not read yet; convert it with llama.cpp's "
              "convert_hf_to_gguf.py and run the GGUF file");
}

void refuse_gemma4_hf_write(const ModelConfig&, nlohmann::json&) {
  throw Error("a gemma4 model is not written as a directory yet; keep its GGUF file");
}

}  // namespace

Family gemma4_family() {
  Family f;
  f.name = "gemma4";
  f.hf = {{"Gemma4ForCausalLM", "gemma4_text", 1e-6, 131072, 2, 1, true, 1000000.0}};
  f.qk_norm = true;
  f.gguf_per_layer_counts = true;
  f.gguf_names = {{"post_attention_norm.weight", "post_attention_norm.weight"},
                  {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"}};
  f.read_gguf = read_gemma4_gguf;
  f.write_gguf = write_gemma4_gguf;
  f.read_hf = refuse_gemma4_hf;
  f.write_hf = refuse_gemma4_hf_write;
  return f;
}

}  // namespace splitspec

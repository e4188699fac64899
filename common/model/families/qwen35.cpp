// Qwen3.5 (dense): a hybrid decoder. Three layers of four are gated
// delta-rule layers (linear attention with a short causal convolution and a
// recurrent state: model_config.h), every fourth full attention whose query
// projection also gives a sigmoid gate on its output, with per-head query and
// key norms and RoPE on a quarter of each head (M-RoPE's sections, which for
// text, where every section takes the same position, is plain RoPE). The
// norm before the MLP is llama.cpp's post_attention_norm. Files past the
// decoder's layers hold its MTP blocks (nextn_predict_layers), which the
// decoder does not run.
//
// Read as llama.cpp's loader reads it (src/models/qwen35.cpp). Its Hugging
// Face directories (Qwen3_5ForConditionalGeneration, the text config nested)
// hold A_log where llama.cpp holds -exp(A_log), norms less 1 but the gated
// one, and value heads in another order; they are refused for now, naming
// the conversion that reads them. qwen35moe is refused by its name.
#include <nlohmann/json.hpp>

#include "common/model/family.h"
#include "common/model/gguf_model.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

// llama.cpp's own default when a file gives neither the per-layer kinds nor
// the interval.
constexpr uint32_t kQwen35FullAttentionInterval = 4;

void read_qwen35_gguf(const GgufFile& f, ModelConfig& c) {
  const std::string& path = f.path();
  const std::string k = "qwen35.";
  // block_count counts the MTP blocks stored after the decoder's layers.
  const int64_t nextn = gguf_u32(f, k + "nextn_predict_layers", 0);
  if (nextn >= c.num_hidden_layers) throw Error(path + ": " + k + "nextn_predict_layers leaves no decoder layers");
  const int64_t stored = c.num_hidden_layers;
  c.num_hidden_layers -= nextn;
  c.attn_output_gate = true;
  c.ssm_conv_kernel = gguf_u32(f, k + "ssm.conv_kernel");
  c.ssm_head_dim = gguf_u32(f, k + "ssm.state_size");
  c.ssm_key_heads = gguf_u32(f, k + "ssm.group_count");
  c.ssm_value_heads = gguf_u32(f, k + "ssm.time_step_rank");
  const int64_t inner = gguf_u32(f, k + "ssm.inner_size");
  if (inner != c.ssm_value_heads * c.ssm_head_dim)
    throw Error(path + ": " + k + "ssm.inner_size " + std::to_string(inner) + " is not ssm.time_step_rank x ssm.state_size (" +
                std::to_string(c.ssm_value_heads * c.ssm_head_dim) + "): value heads of another size than the keys' are not supported");
  c.recurrent_layers.assign(static_cast<size_t>(c.num_hidden_layers), 0);
  const std::string kinds = k + "attention.recurrent_layers";
  if (f.has(kinds)) {
    const GgufValue& v = f.get(kinds);
    const size_t n = v.nums.empty() ? v.bytes.size() : v.nums.size();
    if (v.type != GgufType::kArray || static_cast<int64_t>(n) != stored)
      throw Error(path + ": " + kinds + " must list " + std::to_string(stored) + " layers");
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      c.recurrent_layers[static_cast<size_t>(l)] = v.nums.empty() ? v.bytes[static_cast<size_t>(l)] != 0 : v.nums[static_cast<size_t>(l)] != 0;
  } else {
    const int64_t interval = gguf_u32(f, k + "full_attention_interval", kQwen35FullAttentionInterval);
    if (interval <= 0) throw Error(path + ": " + k + "full_attention_interval must be positive");
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) c.recurrent_layers[static_cast<size_t>(l)] = (l + 1) % interval != 0;
  }
}

void write_qwen35_gguf(const ModelConfig& c, GgufWriter& g, const std::string&) {
  const std::string k = "qwen35.";
  g.add_u32(k + "ssm.conv_kernel", static_cast<uint32_t>(c.ssm_conv_kernel));
  g.add_u32(k + "ssm.state_size", static_cast<uint32_t>(c.ssm_head_dim));
  g.add_u32(k + "ssm.group_count", static_cast<uint32_t>(c.ssm_key_heads));
  g.add_u32(k + "ssm.time_step_rank", static_cast<uint32_t>(c.ssm_value_heads));
  g.add_u32(k + "ssm.inner_size", static_cast<uint32_t>(c.ssm_value_dim()));
  GgufValue kinds;
  kinds.type = GgufType::kArray;
  kinds.elem = GgufType::kBool;
  for (uint8_t r : c.recurrent_layers) kinds.nums.push_back(r);
  g.add_value(k + "attention.recurrent_layers", kinds);
  // llama.cpp requires M-RoPE's sections; for text any split of the rotated
  // pairs gives the same angles. Hugging Face's proportions (11, 11, 10 of 32).
  const int32_t half = static_cast<int32_t>(c.rotary_dims() / 2);
  g.add_i32s(k + "rope.dimension_sections", {(half + 2) / 3, (half + 1) / 3, half / 3, 0});
}

void refuse_qwen35_hf(const nlohmann::json&, ModelConfig&, const std::string& source) {
  throw Error(source + ": Qwen3.5's Hugging Face directories are not read yet; convert it with llama.cpp's "
              "convert_hf_to_gguf.py and run the GGUF file");
}

void refuse_qwen35_hf_write(const ModelConfig&, nlohmann::json&) {
  throw Error("a qwen35 model is not written as a directory yet; keep its GGUF file");
}

}  // namespace

Family qwen35_family() {
  Family f;
  f.name = "qwen35";
  f.hf = {{"Qwen3_5ForCausalLM", "qwen3_5_text", 1e-6, 262144, -1, -1}};
  f.qk_norm = true;
  f.gguf_names = {{"post_attention_layernorm.weight", "post_attention_norm.weight"}};
  f.read_gguf = read_qwen35_gguf;
  f.write_gguf = write_qwen35_gguf;
  f.read_hf = refuse_qwen35_hf;
  f.write_hf = refuse_qwen35_hf_write;
  return f;
}

}  // namespace splitspec

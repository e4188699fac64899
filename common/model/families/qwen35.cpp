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
// Face directories (Qwen3_5ForConditionalGeneration, the text config nested,
// the text model's tensors under model.language_model.) are read as llama.cpp's
// converter turns them (conversion/qwen.py): A_log into A = -exp(A_log),
// the convolution [channels, 1, kernel] into [channels, kernel], norm gains
// less 1 (the gated norm's excepted), and the value heads, grouped by key
// head there, into llama.cpp's tiled order (value head t is key head t mod
// key heads'). Its MTP block (mtp.*) is read from GGUF files only.
// qwen35moe is refused by its name.
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/kernels/quant.h"
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

void read_qwen35_hf(const nlohmann::json& j, ModelConfig& c, const std::string& source) {
  c.attn_output_gate = true;
  c.ssm_conv_kernel = config_integer(j, "linear_conv_kernel_dim", 0, source);
  c.ssm_head_dim = config_integer(j, "linear_key_head_dim", 0, source);
  c.ssm_key_heads = config_integer(j, "linear_num_key_heads", 0, source);
  c.ssm_value_heads = config_integer(j, "linear_num_value_heads", 0, source);
  if (config_integer(j, "linear_value_head_dim", c.ssm_head_dim, source) != c.ssm_head_dim)
    throw Error(source + ": linear_value_head_dim differs from linear_key_head_dim, which is not supported");
  // Qwen3.5 gives its RoPE in rope_parameters: the base, and the share of a
  // head that rotates (M-RoPE's sections are plain RoPE for text).
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const nlohmann::json& rp = j["rope_parameters"];
    c.rope_theta = config_number(rp, "rope_theta", c.rope_theta, source);
    const double partial = config_number(rp, "partial_rotary_factor", 1.0, source);
    if (partial != 1.0) c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);
  }
  c.recurrent_layers.assign(static_cast<size_t>(c.num_hidden_layers), 0);
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const nlohmann::json& types = j["layer_types"];
    if (static_cast<int64_t>(types.size()) != c.num_hidden_layers)
      throw Error(source + ": 'layer_types' lists " + std::to_string(types.size()) + " layers of " +
                  std::to_string(c.num_hidden_layers));
    for (size_t l = 0; l < types.size(); ++l) {
      if (types[l] != "linear_attention" && types[l] != "full_attention")
        throw Error(source + ": 'layer_types' holds " + types[l].dump() + " (linear_attention and full_attention are known)");
      c.recurrent_layers[l] = types[l] == "linear_attention";
    }
  } else {
    const int64_t interval = config_integer(j, "full_attention_interval", kQwen35FullAttentionInterval, source);
    if (interval <= 0) throw Error(source + ": 'full_attention_interval' must be positive");
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) c.recurrent_layers[static_cast<size_t>(l)] = (l + 1) % interval != 0;
  }
}

// Value head t of llama.cpp's tiled order is value head g of the Hugging
// Face file's, grouped by key head (conversion/qwen.py _reorder_v_heads).
int64_t grouped_head(const ModelConfig& c, int64_t t) {
  const int64_t nk = c.ssm_key_heads, per_key = c.ssm_value_heads / c.ssm_key_heads;
  return (t % nk) * per_key + t / nk;
}

std::optional<HfTensor> read_qwen35_hf_tensor(const std::string& name, const TensorInfo& t,
                                              const std::vector<int64_t>& shape, const ModelConfig& c) {
  auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  const bool a = ends("linear_attn.A"), conv = ends("linear_attn.conv1d.weight");
  const bool value_rows = ends("linear_attn.in_proj_qkv.weight") || ends("linear_attn.in_proj_z.weight") ||
                          ends("linear_attn.in_proj_b.weight") || ends("linear_attn.in_proj_a.weight") ||
                          ends("linear_attn.dt_bias") || a || conv;
  const bool value_cols = ends("linear_attn.out_proj.weight");
  if (!value_rows && !value_cols) return std::nullopt;
  if (!t.wtype.empty() || (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16))
    throw Error(t.file + ": tensor '" + t.name + "' must be F32, F16 or BF16 (its value heads are reordered as it loads)");
  const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
  // conv1d is [channels, 1, kernel] there, [channels, kernel] here.
  std::vector<int64_t> want = shape.size() == 2 ? shape : std::vector<int64_t>{cols};
  if (conv) want = {c.ssm_channels(), 1, c.ssm_conv_kernel};
  if (t.shape != want)
    throw Error(t.file + ": tensor '" + t.name + "' has shape " + shape_str(t.shape) + ", expected " + shape_str(want));
  const WType type = t.dtype == DType::F32 ? WType::F32 : t.dtype == DType::F16 ? WType::F16 : WType::BF16;
  const size_t elem = type == WType::F32 ? 4 : 2;
  // Units of `width` elements (a head's rows, a channel's taps, a value),
  // the value heads' after the first `skip` units.
  HfTensor out{type, WeightBytes(t.nbytes)};
  auto permute_units = [&](int64_t skip, int64_t width) {
    const size_t unit = static_cast<size_t>(width) * elem;
    std::memcpy(out.bytes.data(), t.data, static_cast<size_t>(skip) * unit);
    for (int64_t h = 0; h < c.ssm_value_heads; ++h)
      std::memcpy(out.bytes.data() + static_cast<size_t>(skip + h) * unit,
                  t.data + static_cast<size_t>(skip + grouped_head(c, h)) * unit, unit);
  };
  const int64_t D = c.ssm_head_dim, keys = 2 * c.ssm_key_dim();
  if (value_cols) {
    // out_proj [hidden, value heads x head]: each row's columns by head.
    const size_t head = static_cast<size_t>(D) * elem, row = static_cast<size_t>(cols) * elem;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < c.ssm_value_heads; ++h)
        std::memcpy(out.bytes.data() + r * row + h * head, t.data + r * row + grouped_head(c, h) * head, head);
    return out;
  }
  if (ends("linear_attn.in_proj_qkv.weight")) {
    permute_units(keys / D, D * cols);  // q and k rows as they are, the value rows by head
  } else if (ends("linear_attn.in_proj_z.weight")) {
    permute_units(0, D * cols);
  } else if (conv) {
    permute_units(keys / D, D * c.ssm_conv_kernel);  // q and k channels as they are
  } else {
    permute_units(0, shape.size() == 2 ? cols : 1);  // in_proj_b, in_proj_a ([heads, hidden]); dt_bias, A_log ([heads])
  }
  if (!a) return out;
  // A = -exp(A_log), in float as the converter's torch does.
  std::vector<float> v(static_cast<size_t>(cols));
  dequantize_rows(MatrixRef{type, out.bytes.data(), 1, cols}, 0, 1, v.data());
  HfTensor f{WType::F32, WeightBytes(v.size() * sizeof(float))};
  for (float& x : v) x = -std::exp(x);
  std::memcpy(f.bytes.data(), v.data(), f.bytes.size());
  return f;
}

void refuse_qwen35_hf_write(const ModelConfig&, nlohmann::json&) {
  throw Error("a qwen35 model is not written as a directory yet; keep its GGUF file");
}

}  // namespace

Family qwen35_family() {
  Family f;
  f.name = "qwen35";
  f.hf = {{"Qwen3_5ForCausalLM", "qwen3_5_text", 1e-6, 262144, -1, -1},
          {"Qwen3_5ForConditionalGeneration", "qwen3_5", 1e-6, 262144, -1, -1}};
  f.qk_norm = true;
  f.hf_gains_less_one = true;
  // A_log there, A (-exp(A_log)) here.
  f.hf_names = {{"linear_attn.A", "linear_attn.A_log"}};
  f.gguf_names = {{"post_attention_layernorm.weight", "post_attention_norm.weight"}};
  f.read_gguf = read_qwen35_gguf;
  f.write_gguf = write_qwen35_gguf;
  f.read_hf = read_qwen35_hf;
  f.hf_tensor = read_qwen35_hf_tensor;
  f.write_hf = refuse_qwen35_hf_write;
  return f;
}

}  // namespace splitspec

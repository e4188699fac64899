#include "common/model/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

#include "common/util/error.h"
#include "common/model/family.h"
#include "common/model/weight_names.h"

namespace splitspec {

uint32_t gguf_u32(const GgufFile& f, const std::string& key, std::optional<uint32_t> fallback) {
  if (!f.has(key)) {
    if (fallback) return *fallback;
    f.get(key);  // throws, naming the key
  }
  const GgufValue& v = f.get(key);
  if (v.type == GgufType::kString || v.type == GgufType::kArray || v.i64 < 0 || v.i64 > UINT32_MAX ||
      v.num != static_cast<double>(v.i64))
    throw Error(f.path() + ": GGUF metadata '" + key + "' is not a count");
  return static_cast<uint32_t>(v.i64);
}

std::vector<int64_t> gguf_counts(const GgufFile& f, const std::string& key, int64_t layers,
                                 std::optional<uint32_t> fallback) {
  if (!f.has(key) || f.get(key).type != GgufType::kArray)
    return std::vector<int64_t>(static_cast<size_t>(layers), gguf_u32(f, key, fallback));
  const GgufValue& v = f.get(key);
  if (static_cast<int64_t>(v.nums.size()) != layers)
    throw Error(f.path() + ": GGUF metadata '" + key + "' lists " + std::to_string(v.nums.size()) + " values for " +
                std::to_string(layers) + " layers");
  std::vector<int64_t> out;
  for (double x : v.nums) {
    if (!(x >= 0) || x > UINT32_MAX || x != static_cast<double>(static_cast<int64_t>(x)))
      throw Error(f.path() + ": GGUF metadata '" + key + "' is not a list of counts");
    out.push_back(static_cast<int64_t>(x));
  }
  return out;
}

namespace {

std::optional<WType> wtype_of(uint32_t ggml) {
  switch (static_cast<GgmlType>(ggml)) {
    case GgmlType::kF32: return WType::F32;
    case GgmlType::kF16: return WType::F16;
    case GgmlType::kBF16: return WType::BF16;
    case GgmlType::kQ8_0: return WType::Q8_0;
    case GgmlType::kQ4_0: return WType::Q4_0;
    case GgmlType::kQ2_K: return WType::Q2_K;
    case GgmlType::kQ3_K: return WType::Q3_K;
    case GgmlType::kQ4_K: return WType::Q4_K;
    case GgmlType::kQ5_K: return WType::Q5_K;
    case GgmlType::kQ6_K: return WType::Q6_K;
    case GgmlType::kQ4_1: return WType::Q4_1;
    case GgmlType::kQ5_0: return WType::Q5_0;
    case GgmlType::kQ5_1: return WType::Q5_1;
    case GgmlType::kIQ4_NL: return WType::IQ4_NL;
    case GgmlType::kIQ4_XS: return WType::IQ4_XS;
  }
  return std::nullopt;
}

// Query rows permute by attention heads, key rows by key-value heads, in
// the families whose GGUF files interleave them.
int64_t permuted_heads(const std::string& name, const ModelConfig& c) {
  if (!family_of(c).gguf_rope_interleaved) return 0;
  if (name.find("self_attn.q_proj.weight") != std::string::npos) return c.num_attention_heads;
  if (name.find("self_attn.k_proj.weight") != std::string::npos) return c.num_key_value_heads;
  return 0;
}

}  // namespace

double gguf_number(const GgufFile& f, const std::string& key, double fallback) {
  if (!f.has(key)) return fallback;
  const GgufValue& v = f.get(key);
  if (v.type == GgufType::kString || v.type == GgufType::kArray || !std::isfinite(v.num))
    throw Error(f.path() + ": GGUF metadata '" + key + "' is not a number");
  return v.num;
}

int64_t gguf_sliding_pattern(const GgufFile& f, const std::string& key, int64_t layers, int64_t fallback) {
  if (!f.has(key)) return fallback;
  const std::string& path = f.path();
  const GgufValue& v = f.get(key);
  if (v.type != GgufType::kArray) {
    const int64_t pattern = gguf_u32(f, key);
    if (pattern <= 0) throw Error(path + ": " + key + " must be positive");
    return pattern;
  }
  // Per layer, true where it is local: accepted when periodic.
  if (v.elem != GgufType::kBool) throw Error(path + ": " + key + " must be a count or a list of booleans");
  std::vector<bool> local;
  for (double x : v.nums) local.push_back(x != 0.0);
  if (static_cast<int64_t>(local.size()) != layers)
    throw Error(path + ": " + key + " lists " + std::to_string(local.size()) + " layers of " + std::to_string(layers));
  int64_t pattern = 0;
  for (size_t i = 0; i < local.size() && pattern == 0; ++i)
    if (!local[i]) pattern = static_cast<int64_t>(i) + 1;
  if (pattern == 0) pattern = layers + 1;
  for (size_t i = 0; i < local.size(); ++i)
    if (local[i] != (static_cast<int64_t>(i) % pattern < pattern - 1))
      throw Error(path + ": " + key + " is not every " + std::to_string(pattern) + "th layer global");
  return pattern;
}

WeightBytes permute_rope_rows(const uint8_t* rows, int64_t count, int64_t head_dim, int64_t rb, bool to_gguf) {
  WeightBytes out(static_cast<size_t>(count * rb));
  for (int64_t h = 0; h < count / head_dim; ++h)
    for (int64_t i = 0; i < head_dim / 2; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t gguf = h * head_dim + 2 * i + j, hf = h * head_dim + j * head_dim / 2 + i;
        const int64_t from = to_gguf ? hf : gguf, to = to_gguf ? gguf : hf;
        std::memcpy(out.data() + to * rb, rows + from * rb, static_cast<size_t>(rb));
      }
  return out;
}

std::string gguf_tensor_name(const std::string& name, const ModelConfig& c) {
  if (name == kEmbedName) return "token_embd.weight";
  if (name == kHeadName) return "output.weight";
  if (name == kFinalNormName) return "output_norm.weight";
  if (name == kPerLayerEmbedName) return "per_layer_token_embd.weight";
  if (name == kPerLayerProjName) return "per_layer_model_proj.weight";
  if (name == kPerLayerNormName) return "per_layer_proj_norm.weight";
  static const std::pair<const char*, const char*> kParts[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
      {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
      {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
      {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
      {"linear_attn.out_proj.weight", "ssm_out.weight"},
      {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
      {"linear_attn.dt_bias", "ssm_dt.bias"},
      {"linear_attn.A", "ssm_a"},
      {"linear_attn.norm.weight", "ssm_norm.weight"},
      {"per_layer_input_gate.weight", "inp_gate.weight"},
      {"per_layer_projection.weight", "proj.weight"},
      {"post_per_layer_input_norm.weight", "post_norm.weight"},
      {"layer_scalar", "layer_output_scale.weight"},
  };
  const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) == 0) {
    const size_t dot = name.find('.', prefix.size());
    const std::string layer = name.substr(prefix.size(), dot - prefix.size()), part = name.substr(dot + 1);
    for (const auto& [from, to] : family_of(c).gguf_names)
      if (part == from) return "blk." + layer + "." + to;
    for (const auto& [from, to] : kParts)
      if (part == from) return "blk." + layer + "." + to;
  }
  throw Error("gguf: no GGUF name for '" + name + "' in a " + c.architecture + " model");
}

std::vector<int64_t> gguf_vector_ne(const std::string& name, int64_t size, const ModelConfig& c) {
  static const std::string kConv = "linear_attn.conv1d.weight";
  if (c.ssm_conv_kernel > 0 && name.size() > kConv.size() &&
      name.compare(name.size() - kConv.size(), kConv.size(), kConv) == 0)
    return {c.ssm_conv_kernel, size / c.ssm_conv_kernel};
  return {size};
}

ModelConfig gguf_model_config(const GgufFile& f) {
  const std::string& path = f.path();
  const std::string arch = f.get("general.architecture").str;
  const Family* family = lookup_family(arch);
  if (!family) throw Error(path + ": architecture '" + arch + "' is not supported; SplitSpec runs " + family_names());
  const GgufTensor* embed = f.tensor("token_embd.weight");
  if (!embed || embed->ne.size() != 2) throw Error(path + ": tensor 'token_embd.weight' is missing or not a matrix");
  const std::string k = arch + ".";
  ModelConfig c;
  c.architecture = arch;
  c.hidden_size = gguf_u32(f, k + "embedding_length");
  c.num_hidden_layers = gguf_u32(f, k + "block_count");
  c.num_attention_heads = gguf_u32(f, k + "attention.head_count");
  // Checked before anything is sized by it.
  if (c.num_hidden_layers <= 0 || c.num_hidden_layers > 4096)
    throw Error(path + ": " + k + "block_count " + std::to_string(c.num_hidden_layers) + " is not a layer count");
  // Counts a family may give per layer: the first layer's here, the rest
  // its read_gguf's business (one that does not read them refuses them).
  const std::vector<int64_t> widths = gguf_counts(f, k + "feed_forward_length", c.num_hidden_layers);
  const std::vector<int64_t> kv_heads = gguf_counts(f, k + "attention.head_count_kv", c.num_hidden_layers,
                                                    static_cast<uint32_t>(c.num_attention_heads));
  for (const auto* counts : {&widths, &kv_heads})
    if (!family->gguf_per_layer_counts && std::count(counts->begin(), counts->end(), counts->front()) != c.num_hidden_layers)
      throw Error(path + ": per-layer MLP widths or key-value heads are not supported in a " + arch + " model");
  c.intermediate_size = widths.empty() ? 0 : widths.front();
  c.num_key_value_heads = kv_heads.empty() ? 0 : kv_heads.front();
  if (c.num_attention_heads <= 0) throw Error(path + ": " + k + "attention.head_count must be positive");
  c.head_dim = gguf_u32(f, k + "attention.key_length", static_cast<uint32_t>(c.hidden_size / c.num_attention_heads));
  if (gguf_u32(f, k + "attention.value_length", static_cast<uint32_t>(c.head_dim)) != c.head_dim)
    throw Error(path + ": key and value heads of different sizes are not supported");
  const int64_t rotary = gguf_u32(f, k + "rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  if (rotary != c.head_dim) c.rotary_dim = rotary;
  c.vocab_size = embed->ne[1];
  c.rms_norm_eps = gguf_number(f, k + "attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_theta = gguf_number(f, k + "rope.freq_base", 10000.0);
  c.max_position_embeddings = gguf_u32(f, k + "context_length");
  c.tie_word_embeddings = f.tensor("output.weight") == nullptr;
  c.bos_token_id = f.has("tokenizer.ggml.bos_token_id") ? static_cast<int64_t>(gguf_u32(f, "tokenizer.ggml.bos_token_id")) : -1;
  c.eos_token_id = f.has("tokenizer.ggml.eos_token_id") ? static_cast<int64_t>(gguf_u32(f, "tokenizer.ggml.eos_token_id")) : -1;
  if (c.eos_token_id >= 0) c.eos_token_ids.push_back(c.eos_token_id);
  // Each a [rotary_dim / 2] F32 tensor, as rope_freqs below.
  auto factors = [&](const char* name, std::vector<float>& out) {
    const GgufTensor* t = f.tensor(name);
    if (!t) return false;
    if (t->type != static_cast<uint32_t>(GgmlType::kF32) || t->ne.size() != 1 || t->ne[0] != c.rotary_dims() / 2)
      throw Error(path + ": " + name + " must be " + std::to_string(c.rotary_dims() / 2) + " F32 values");
    out.resize(static_cast<size_t>(c.rotary_dims() / 2));
    std::memcpy(out.data(), t->data, out.size() * sizeof(float));
    return true;
  };
  // LongRoPE (Phi-3.5, Phi-4-mini): both sets of factors, the context they
  // switch at and the attention factor, as llama.cpp's converter writes them.
  const bool has_long = factors("rope_factors_long.weight", c.rope_long_factors);
  if (factors("rope_factors_short.weight", c.rope_short_factors) != has_long)
    throw Error(path + ": LongRoPE needs both rope_factors_long and rope_factors_short");
  if (has_long) {
    c.rope_original_context = gguf_u32(f, k + "rope.scaling.original_context_length");
    c.rope_attention_factor = gguf_number(f, k + "rope.scaling.attn_factor", 1.0);
  }
  const std::string scaling = f.has(k + "rope.scaling.type") ? f.get(k + "rope.scaling.type").str : "none";
  if (scaling == "linear") {
    c.rope_freq_factors.assign(static_cast<size_t>(c.head_dim / 2),
                               static_cast<float>(gguf_number(f, k + "rope.scaling.factor", 1.0)));
  } else if (scaling != "none") {
    throw Error(path + ": RoPE scaling '" + scaling + "' is not supported (llama3's rope_freqs and linear are)");
  }
  if (const GgufTensor* freqs = f.tensor("rope_freqs.weight")) {
    if (freqs->type != static_cast<uint32_t>(GgmlType::kF32) || freqs->ne.size() != 1 || freqs->ne[0] != c.head_dim / 2)
      throw Error(path + ": rope_freqs.weight must be " + std::to_string(c.head_dim / 2) + " F32 values");
    c.rope_freq_factors.resize(static_cast<size_t>(c.head_dim / 2));
    std::memcpy(c.rope_freq_factors.data(), freqs->data, c.rope_freq_factors.size() * sizeof(float));
  }
  if (family->read_gguf) family->read_gguf(f, c);
  // What the attention layers have, seen on the first (a hybrid model's
  // first layers may be delta-rule ones).
  int64_t first = 0;
  while (first < c.num_hidden_layers && c.layer_is_recurrent(first)) ++first;
  if (first < c.num_hidden_layers) {
    const std::string blk = "blk." + std::to_string(first) + ".";
    c.attention_bias = f.tensor(blk + "attn_q.bias") != nullptr;
    if (f.tensor(blk + "attn_output.bias"))
      throw Error(path + ": a bias on the attention output (" + blk + "attn_output.bias) is not supported");
    c.qk_norm = f.tensor(blk + "attn_q_norm.weight") != nullptr;
    if (family->qk_norm && !c.qk_norm) throw Error(path + ": a " + arch + " model without " + blk + "attn_q_norm.weight");
  } else {
    c.qk_norm = family->qk_norm;  // no attention layer to say otherwise
  }
  if (f.has(k + "attention.sliding_window")) {
    c.sliding_window = gguf_u32(f, k + "attention.sliding_window");
    if (c.sliding_window > 0 && c.sliding_window < c.max_position_embeddings && c.sliding_window_pattern == 0) {
      c.declared_context = c.max_position_embeddings;
      c.max_position_embeddings = c.sliding_window;
    }
  }
  c.validate(path);
  return c;
}


namespace {

WType read_type(const GgufFile& f, const GgufTensor& t) {
  const auto wt = wtype_of(t.type);
  if (!wt)
    throw Error(f.path() + ": tensor '" + t.name + "' is " + ggml_type_name(t.type) +
                ", which SplitSpec does not read (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, "
                "Q4_K, Q5_K, Q6_K and IQ4_XS are); requantize the F16 original with llama.cpp's llama-quantize to "
                "one of the mixes Q4_K_M, Q5_K_M, Q3_K_M, Q2_K, Q6_K, Q8_0 or IQ4_XS");
  return *wt;
}

}  // namespace

MatrixRef gguf_tensor_ref(const GgufFile& f, const std::string& gguf_name, const std::vector<int64_t>& shape) {
  const GgufTensor* t = f.tensor(gguf_name);
  if (!t) throw Error(f.path() + ": tensor '" + gguf_name + "' is missing");
  const std::vector<int64_t> want = shape.size() == 2 ? std::vector<int64_t>{shape[1], shape[0]} : shape;
  if (t->ne != want)
    throw Error(f.path() + ": tensor '" + gguf_name + "' has shape " + shape_str(t->ne) + " (ggml order), expected " +
                shape_str(want));
  return MatrixRef{read_type(f, *t), t->data, shape.size() == 2 ? shape[0] : 1, shape.back()};
}

namespace {

// Where our tensor `name` of `shape` lies in the file: its tensor (a fused
// one's row slice), checked for shape and type.
struct GgufPlace {
  const GgufTensor* tensor = nullptr;
  WType type = WType::F32;
  uint64_t skip = 0;  // bytes into the tensor
  int64_t rows = 1, cols = 0;
};

GgufPlace gguf_place(const GgufFile& f, const ModelConfig& c, const std::map<std::string, FusedPart>& fused,
                     const std::string& name, const std::vector<int64_t>& shape) {
  const auto part = fused.find(name);
  const bool sliced = part != fused.end();
  const std::string gname = gguf_tensor_name(sliced ? part->second.name : name, c);
  const GgufTensor* t = f.tensor(gname);
  if (!t) throw Error(f.path() + ": tensor '" + gname + "' is missing");
  const int64_t rows = shape.size() == 2 ? (sliced ? part->second.fused_rows : shape[0]) : 1;
  const std::vector<int64_t> want =
      shape.size() == 2 ? std::vector<int64_t>{shape[1], rows} : gguf_vector_ne(name, shape[0], c);
  if (t->ne != want)
    throw Error(f.path() + ": tensor '" + gname + "' has shape " + shape_str(t->ne) + " (ggml order), expected " +
                shape_str(want));
  GgufPlace p;
  p.tensor = t;
  p.type = read_type(f, *t);
  p.rows = shape.size() == 2 ? shape[0] : 1;
  p.cols = shape.back();
  if (sliced) p.skip = static_cast<uint64_t>(part->second.row0 * row_bytes(p.type, p.cols));
  return p;
}

}  // namespace

WeightSource gguf_weight_source(const GgufFile& f, const ModelConfig& c, std::map<std::string, WeightBytes>& keep) {
  return [&f, &c, &keep, fused = fused_parts(c)](const std::string& name, const std::vector<int64_t>& shape) -> MatrixRef {
    const GgufPlace p = gguf_place(f, c, fused, name, shape);
    MatrixRef m{p.type, p.tensor->data + p.skip, p.rows, p.cols};
    if (const int64_t heads = permuted_heads(name, c)) {
      WeightBytes& copy = keep[name];
      copy = permute_rope_rows(static_cast<const uint8_t*>(m.data), heads * c.head_dim, c.head_dim,
                               row_bytes(p.type, p.cols), false);
      m.data = copy.data();
      // Only the copy is read from here on.
      f.release(*p.tensor);
    }
    return m;
  };
}

TensorLocator gguf_locator(const GgufFile& f, const ModelConfig& c) {
  return [&f, c, fused = fused_parts(c)](const std::string& name, const std::vector<int64_t>& shape) {
    const GgufPlace p = gguf_place(f, c, fused, name, shape);
    StoredTensor s;
    s.file = f.path();
    s.offset = p.tensor->file_offset + p.skip;
    s.bytes = static_cast<uint64_t>(p.rows * row_bytes(p.type, p.cols));
    s.type = p.type;
    s.rows = p.rows;
    s.cols = p.cols;
    s.rope_heads = permuted_heads(name, c);
    return s;
  };
}

std::function<void(const std::string&)> gguf_copied_releaser(const GgufFile& f, const ModelConfig& c) {
  return [&f, &c, fused = fused_parts(c)](const std::string& name) {
    const auto part = fused.find(name);
    // A fused tensor's other parts, if still to be read, map its pages in again.
    if (const GgufTensor* t = f.tensor(gguf_tensor_name(part != fused.end() ? part->second.name : name, c))) f.release(*t);
  };
}

}  // namespace splitspec

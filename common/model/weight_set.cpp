#include "common/model/weight_set.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "common/kernels/quant.h"
#include "common/model/family.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

std::string dims(const std::vector<int64_t>& shape) { return shape_str(shape); }

}  // namespace

WeightBytes plain_bytes(const MatrixRef& src, WType to, const std::string& name) {
  if (src.cols % block_weights(to) != 0)
    throw Error(std::string("cannot store ") + name + " as " + wtype_name(to) + ": its rows of " +
                std::to_string(src.cols) + " weights are not a multiple of " + std::to_string(block_weights(to)));
  WeightBytes out(static_cast<size_t>(src.rows * row_bytes(to, src.cols)));
  if (src.type == to) {
    std::memcpy(out.data(), src.data, out.size());
    std::vector<uint8_t> scratch;
    if (src.packed) unpack_rows(to, out.data(), src.rows, src.cols, scratch);
    return out;
  }
  constexpr int64_t kRows = 64;
  std::vector<float> rows(static_cast<size_t>(kRows * src.cols));
  for (int64_t r = 0; r < src.rows; r += kRows) {
    const int64_t r1 = std::min(src.rows, r + kRows);
    dequantize_rows(src, r, r1, rows.data());
    quantize_rows(to, rows.data(), r1 - r, src.cols, out.data() + r * row_bytes(to, src.cols));
  }
  return out;
}

namespace {

DType file_dtype(WType t) {
  switch (t) {
    case WType::F32: return DType::F32;
    case WType::F16: return DType::F16;
    case WType::BF16: return DType::BF16;
    default: return DType::U8;
  }
}

}  // namespace

TensorSlot embed_slot(const ModelConfig& c) {
  return {c.tie_word_embeddings ? TensorSlot::kHead : TensorSlot::kEmbed, 0, c.num_hidden_layers, c.hidden_size};
}

TensorSlot head_slot(const ModelConfig& c) { return {TensorSlot::kHead, 0, c.num_hidden_layers, c.hidden_size}; }

TensorSlot layer_slot(const ModelConfig& c, int64_t layer, LayerMatrix m) {
  // A matrix fused with the value projection is quantized as it is (llama.cpp's attn_qkv).
  const auto v = fused_part(layer, LayerMatrix::kV, c), mine = fused_part(layer, m, c);
  TensorSlot::Kind kind = TensorSlot::kOther;
  if (m == LayerMatrix::kV || (v && mine && mine->name == v->name)) kind = TensorSlot::kAttnV;
  if (m == LayerMatrix::kO) kind = TensorSlot::kAttnOut;
  if (m == LayerMatrix::kDown) kind = TensorSlot::kFfnDown;
  const int64_t gqa = c.num_key_value_heads > 0 ? c.num_attention_heads / c.num_key_value_heads : 1;
  return {kind, layer, c.num_hidden_layers, layer_matrix_shape(m, c, layer)[1], gqa};
}

namespace {

// llama.cpp's choice for a tensor of a K-quant mix, before the fallback.
WType mix_type(WType model_type, const TensorSlot& slot) {
  const int64_t i = slot.layer, n = slot.layers;
  const bool more_bits = i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
  if (slot.kind == TensorSlot::kHead) return slot.cols % kSuperBlock != 0 ? WType::Q8_0 : WType::Q6_K;
  switch (model_type) {
    case WType::Q4_K:
    case WType::Q5_K:
      if ((slot.kind == TensorSlot::kAttnV || slot.kind == TensorSlot::kFfnDown) && more_bits) return WType::Q6_K;
      return model_type;
    case WType::Q3_K:
      if (slot.kind == TensorSlot::kAttnV) return i < 2 ? WType::Q5_K : WType::Q4_K;
      if (slot.kind == TensorSlot::kFfnDown) return i < n / 16 ? WType::Q5_K : WType::Q4_K;
      if (slot.kind == TensorSlot::kAttnOut) return WType::Q4_K;
      return model_type;
    case WType::Q2_K:
      if (slot.kind == TensorSlot::kAttnV) return slot.gqa >= 4 ? WType::Q4_K : WType::Q3_K;
      if (slot.kind == TensorSlot::kFfnDown || slot.kind == TensorSlot::kAttnOut) return WType::Q3_K;
      return model_type;
    default: return model_type;
  }
}

// llama.cpp's tensor_type_fallback.
WType fallback_type(WType t, int64_t cols) {
  if (cols % block_weights(t) == 0) return t;
  switch (t) {
    case WType::Q4_K: t = WType::Q5_0; break;
    case WType::Q5_K: t = WType::Q5_1; break;
    case WType::Q6_K: t = WType::Q8_0; break;
    case WType::Q2_K:
    case WType::Q3_K: t = WType::Q4_0; break;
    case WType::IQ4_XS: t = WType::IQ4_NL; break;
    default: break;
  }
  return cols % block_weights(t) == 0 ? t : WType::F16;
}

}  // namespace

WType tensor_type(WType model_type, const TensorSlot& slot) {
  if (model_type == WType::Q4_0 && slot.kind == TensorSlot::kHead) return fallback_type(WType::Q8_0, slot.cols);
  return fallback_type(is_kquant(model_type) ? mix_type(model_type, slot) : model_type, slot.cols);
}

uint64_t WeightSet::bytes() const {
  uint64_t n = norms.size() * sizeof(float) + embed.bytes();
  for (const auto& l : vectors)
    for (const auto& v : l) n += v.size() * sizeof(float);
  for (const auto& l : layers)
    for (const MatrixRef& m : l) n += m.bytes();
  if (lm_head.data != embed.data) n += lm_head.bytes();
  if (per_layer.embed.data) n += per_layer.embed.bytes() + per_layer.proj.bytes() + per_layer.norm.size() * sizeof(float);
  return n;
}

namespace {

// Eight bytes at a time (a multiply and a shift each), so a billion-parameter
// model is digested in well under a second.
class Digest {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      mix(w);
    }
    uint64_t tail = n;
    for (; i < n; ++i) tail = (tail << 8) | p[i];
    mix(tail);
  }
  void add(int64_t v) { mix(static_cast<uint64_t>(v)); }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_));
    return buf;
  }

 private:
  void mix(uint64_t w) {
    h_ = (h_ ^ w) * 0x9e3779b97f4a7c15ull;
    h_ ^= h_ >> 29;
  }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// A layer's vector, counted with its size; the delta-rule ones only where
// the layer has them, so that the digests of models without them stay what
// they were before those existed.
void digest_vector(Digest& d, LayerVector v, const std::vector<float>& x) {
  if (x.empty() && static_cast<int>(v) >= static_cast<int>(LayerVector::kSsmConv)) return;
  d.add(static_cast<int64_t>(x.size()));
  d.add(x.data(), x.size() * sizeof(float));
}

}  // namespace

std::string WeightSet::digest() const {
  Digest d;
  std::vector<uint8_t> plain, scratch;
  auto matrix = [&](const MatrixRef& m) {
    d.add(static_cast<int64_t>(m.type));
    d.add(m.rows);
    d.add(m.cols);
    if (!m.packed) {
      d.add(m.data, static_cast<size_t>(m.bytes()));
      return;
    }
    const auto* bytes = static_cast<const uint8_t*>(m.data);
    plain.assign(bytes, bytes + m.bytes());
    unpack_rows(m.type, plain.data(), m.rows, m.cols, scratch);
    d.add(plain.data(), plain.size());
  };
  matrix(embed);
  for (const auto& l : layers)
    for (const MatrixRef& m : l)
      if (m.data) matrix(m);
  matrix(lm_head);
  d.add(norms.data(), norms.size() * sizeof(float));
  for (const auto& l : vectors)
    for (int v = 0; v < kLayerVectors; ++v) digest_vector(d, static_cast<LayerVector>(v), l[v]);
  if (per_layer.embed.data) {
    matrix(per_layer.embed);
    matrix(per_layer.proj);
    d.add(per_layer.norm.data(), per_layer.norm.size() * sizeof(float));
  }
  return d.hex();
}

std::string source_digest(const ModelConfig& c, const WeightSource& source) {
  Digest d;
  auto matrix = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const MatrixRef m = source(name, shape);
    d.add(static_cast<int64_t>(m.type));
    d.add(m.rows);
    d.add(m.cols);
    d.add(m.data, static_cast<size_t>(m.bytes()));
  };
  auto floats = [&](const std::string& name, int64_t size) {
    const MatrixRef src = source(name, {size});
    std::vector<float> v(static_cast<size_t>(size));
    dequantize_rows(src, 0, 1, v.data());
    return v;
  };
  const int64_t H = c.hidden_size;
  matrix(kEmbedName, {c.vocab_size, H});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (LayerMatrix m : layer_matrices(c, l)) matrix(layer_matrix_name(l, m), layer_matrix_shape(m, c, l));
  matrix(c.tie_word_embeddings ? kEmbedName : kHeadName, {c.vocab_size, H});
  std::vector<float> norms;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (bool post : {false, true}) {
      const std::vector<float> v = floats(layer_norm_name(l, post), H);
      norms.insert(norms.end(), v.begin(), v.end());
    }
  const std::vector<float> final_norm = floats(kFinalNormName, H);
  norms.insert(norms.end(), final_norm.begin(), final_norm.end());
  d.add(norms.data(), norms.size() * sizeof(float));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (int v = 0; v < kLayerVectors; ++v) {
      const int64_t size = layer_vector_size(static_cast<LayerVector>(v), c, l);
      digest_vector(d, static_cast<LayerVector>(v),
                    size ? floats(layer_vector_name(l, static_cast<LayerVector>(v)), size) : std::vector<float>{});
    }
  if (const int64_t P = c.per_layer_input_size) {
    matrix(kPerLayerEmbedName, {c.vocab_size, c.num_hidden_layers * P});
    matrix(kPerLayerProjName, {c.num_hidden_layers * P, H});
    const std::vector<float> norm = floats(kPerLayerNormName, P);
    d.add(norm.data(), norm.size() * sizeof(float));
  }
  return d.hex();
}

uint64_t WeightSet::owned_bytes() const {
  uint64_t n = 0;
  for (const auto& o : owned) n += o.size();
  return n;
}

WType stored_wtype(const TensorInfo& t, const std::vector<int64_t>& shape) {
  auto mismatch = [&](const std::string& stored) {
    return Error(t.file + ": tensor '" + t.name + "' has shape " + dims(t.shape) + stored + ", expected " + dims(shape));
  };
  if (!t.wtype.empty()) {
    const auto q = parse_wtype(t.wtype);
    if (!q || !is_block_type(*q) || t.dtype != DType::U8)
      throw Error(t.file + ": tensor '" + t.name + "' is marked '" + t.wtype +
                  "'; only U8 tensors marked with a block type (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, "
                  "q4_k, q5_k, q6_k, iq4_xs) are read");
    if (shape.size() != 2 || shape[1] % block_weights(*q) != 0 || t.shape.size() != 2 || t.shape[0] != shape[0] ||
        t.shape[1] != row_bytes(*q, shape[1]))
      throw mismatch(std::string(" (bytes of ") + wtype_name(*q) + ")");
    return *q;
  }
  if (t.shape != shape) throw mismatch("");
  switch (t.dtype) {
    case DType::F32: return WType::F32;
    case DType::F16: return WType::F16;
    case DType::BF16: return WType::BF16;
    default:
      throw Error(t.file + ": tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) +
                  "; weights must be F32, F16, BF16, or U8 marked with a block type");
  }
}

WeightSet build_weight_set(const ModelConfig& c, const WeightSource& source, std::optional<WType> type, bool borrow,
                           const std::string& where, const std::function<void(const std::string& name)>& copied) {
  const int64_t H = c.hidden_size;
  WeightSet w;
  w.hidden = H;
  std::vector<uint8_t> scratch;
  auto take = [&](const std::string& name, const std::vector<int64_t>& shape, const TensorSlot& slot) -> MatrixRef {
    const MatrixRef src = source(name, shape);
    const int64_t bad = first_non_finite_row(src);
    if (bad >= 0)
      throw Error(where + ": tensor '" + name + "' contains NaN or infinite values (row " + std::to_string(bad) + ")");
    const WType to = type ? tensor_type(*type, slot) : src.type;
    // Packed matrices are copies, so never borrowed.
    if (borrow && to == src.type && !stored_packed(to)) {
      w.borrowed = true;
      return src;
    }
    w.owned.push_back(plain_bytes(src, to, where + ": " + name));
    const MatrixRef converted{to, w.owned.back().data(), src.rows, src.cols};
    if (to != src.type && first_non_finite_row(converted) >= 0)
      throw Error(where + ": tensor '" + name + "' has values beyond what " + wtype_name(to) + " can hold");
    if (stored_packed(to)) pack_rows(to, w.owned.back().data(), src.rows, src.cols, scratch);
    if (copied) copied(name);
    return {to, w.owned.back().data(), src.rows, src.cols, stored_packed(to)};
  };
  auto vector = [&](const std::string& name, int64_t size) {
    const MatrixRef src = source(name, {size});
    if (is_block_type(src.type)) throw Error(where + ": vector '" + name + "' must be F32, F16 or BF16");
    std::vector<float> v(static_cast<size_t>(size));
    dequantize_rows(src, 0, 1, v.data());
    for (float x : v)
      if (!std::isfinite(x)) throw Error(where + ": tensor '" + name + "' contains NaN or infinite values");
    return v;
  };
  auto norm = [&](const std::string& name) {
    const std::vector<float> v = vector(name, H);
    w.norms.insert(w.norms.end(), v.begin(), v.end());
  };
  w.embed = take(kEmbedName, {c.vocab_size, H}, embed_slot(c));
  w.layers.resize(c.num_hidden_layers);
  w.vectors.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    norm(layer_norm_name(l, false));
    for (int v = 0; v < kLayerVectors; ++v)
      if (const int64_t size = layer_vector_size(static_cast<LayerVector>(v), c, l))
        w.vectors[l][v] = vector(layer_vector_name(l, static_cast<LayerVector>(v)), size);
    for (LayerMatrix lm : layer_matrices(c, l))
      w.layers[l][static_cast<int>(lm)] = take(layer_matrix_name(l, lm), layer_matrix_shape(lm, c, l), layer_slot(c, l, lm));
    norm(layer_norm_name(l, true));
  }
  norm(kFinalNormName);
  w.lm_head = c.tie_word_embeddings ? w.embed : take(kHeadName, {c.vocab_size, H}, head_slot(c));
  if (const int64_t P = c.per_layer_input_size) {
    const int64_t L = c.num_hidden_layers;
    w.per_layer.embed = take(kPerLayerEmbedName, {c.vocab_size, L * P}, {TensorSlot::kEmbed, 0, L, L * P});
    w.per_layer.proj = take(kPerLayerProjName, {L * P, H}, {TensorSlot::kOther, 0, L, H});
    w.per_layer.norm = vector(kPerLayerNormName, P);
  }
  return w;
}

std::function<void(const std::string&)> safetensors_copied_releaser(const SafetensorsModel& st, const ModelConfig& c) {
  return [&st, c, fused = fused_parts(c)](const std::string& name) {
    // A fused tensor's other parts, if still to be read, map its pages in again.
    const auto part = fused.find(name);
    st.release(part != fused.end() && !st.has(name) ? part->second.name : hf_file_tensor_name(st, name, c));
  };
}

std::string hf_file_tensor_name(const SafetensorsModel& st, const std::string& ours, const ModelConfig& c) {
  const std::string name = hf_tensor_name(ours, c);
  // A multimodal checkpoint's text model (Qwen3.5's, Gemma's) lies under
  // model.language_model.
  static const std::string kModel = "model.";
  if (st.has(name) || name.compare(0, kModel.size(), kModel) != 0) return name;
  const std::string nested = "model.language_model." + name.substr(kModel.size());
  return st.has(nested) ? nested : name;
}

WeightSource safetensors_source(const SafetensorsModel& st, const ModelConfig& c,
                                std::map<std::string, WeightBytes>* keep) {
  // Our names of the matrices a family fuses, to where they lie.
  const std::map<std::string, FusedPart> fused = fused_parts(c);
  // Gemma's gains as we hold them, 1 + the file's, and tensors the family's
  // files hold in another form: kept for the source's life.
  auto shifted = std::make_shared<std::map<std::string, std::vector<float>>>();
  auto own = std::make_shared<std::map<std::string, WeightBytes>>();
  std::map<std::string, WeightBytes>* converted = keep ? keep : own.get();
  const Family& family = family_of(c);
  return [&st, fused, c, shifted, own, converted, &family](const std::string& name, const std::vector<int64_t>& shape) {
    const int64_t rows = shape.size() == 2 ? shape[0] : 1;
    const auto f = fused.find(name);
    if (f == fused.end() || st.has(name)) {
      const TensorInfo& t = st.get(hf_file_tensor_name(st, name, c));
      if (family.hf_tensor)
        if (std::optional<HfTensor> x = family.hf_tensor(name, t, shape, c)) {
          const WeightBytes& kept = (*converted)[name] = std::move(x->bytes);
          return MatrixRef{x->type, kept.data(), rows, shape.back()};
        }
      const MatrixRef m{stored_wtype(t, shape), t.data, rows, shape.back()};
      if (!hf_gain_less_one(name, c)) return m;
      if (is_block_type(m.type)) throw Error(t.file + ": norm '" + t.name + "' must be F32, F16 or BF16");
      std::vector<float>& v = (*shifted)[name];
      v.resize(static_cast<size_t>(m.rows * m.cols));
      dequantize_rows(m, 0, m.rows, v.data());
      for (float& x : v) x += 1.0f;
      return MatrixRef{WType::F32, v.data(), m.rows, m.cols};
    }
    const TensorInfo& t = st.get(f->second.name);
    const WType wt = stored_wtype(t, {f->second.fused_rows, shape[1]});
    return MatrixRef{wt, t.data + f->second.row0 * row_bytes(wt, shape[1]), rows, shape[1]};
  };
}

TensorLocator safetensors_locator(const SafetensorsModel& st, const ModelConfig& c) {
  return [&st, c, fused = fused_parts(c)](const std::string& name, const std::vector<int64_t>& shape) {
    const auto f = fused.find(name);
    const bool sliced = f != fused.end() && !st.has(name);
    const int64_t rows = shape.size() == 2 ? shape[0] : 1;
    const TensorInfo& t = st.get(sliced ? f->second.name : hf_file_tensor_name(st, name, c));
    StoredTensor s;
    s.file = t.file;
    s.type = stored_wtype(t, sliced ? std::vector<int64_t>{f->second.fused_rows, shape[1]} : shape);
    s.rows = rows;
    s.cols = shape.back();
    s.gain_less_one = hf_gain_less_one(name, c);
    if (shape.size() == 1 && is_block_type(s.type)) throw Error(t.file + ": norm '" + t.name + "' must be F32, F16 or BF16");
    const uint64_t rb = static_cast<uint64_t>(row_bytes(s.type, s.cols));
    s.offset = t.file_offset + (sliced ? static_cast<uint64_t>(f->second.row0) * rb : 0);
    s.bytes = sliced ? static_cast<uint64_t>(rows) * rb : t.nbytes;
    return s;
  };
}

WeightSet load_weight_set(const std::string& dir, const ModelConfig& c, std::optional<WType> type) {
  auto st = std::make_shared<const SafetensorsModel>(dir);
  std::map<std::string, WeightBytes> converted;
  WeightSet w = build_weight_set(
      c, safetensors_source(*st, c, &converted), type, true, st->description(),
      // Each copied tensor's pages go as soon as it is copied, so that loading
      // a converted or packed model never holds the file and the copies at once.
      [&](const std::string& name) {
        st->release(name);
        converted.erase(name);
      });
  for (auto& [name, bytes] : converted) w.owned.push_back(std::move(bytes));
  // Unmapped when nothing was borrowed.
  if (w.borrowed) w.mapping = std::move(st);
  return w;
}

void save_weight_set(const WeightSet& w, const ModelConfig& c, const std::string& dir, std::optional<WType> type) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create directory: " + ec.message());
  // First, so a family whose models are not written refuses before any file is.
  const std::string config_json = model_config_to_json(c);
  std::vector<WeightBytes> bytes;  // alive until written
  std::vector<TensorToWrite> out;
  std::map<std::string, std::string> metadata{{"format", "pt"}};
  // Gemma's gains go out as its Hugging Face files hold them, less 1.
  std::vector<std::vector<float>> less_one;
  auto add = [&](const std::string& ours, MatrixRef m, WType to, bool matrix) {
    const std::string name = hf_tensor_name(ours, c);
    if (hf_gain_less_one(ours, c)) {
      less_one.emplace_back(static_cast<size_t>(m.rows * m.cols));
      dequantize_rows(m, 0, m.rows, less_one.back().data());
      for (float& x : less_one.back()) x -= 1.0f;
      m = MatrixRef{WType::F32, less_one.back().data(), m.rows, m.cols};
    }
    bytes.push_back(plain_bytes(m, to, name));
    std::vector<int64_t> shape = matrix ? std::vector<int64_t>{m.rows, m.cols} : std::vector<int64_t>{m.cols};
    if (is_block_type(to)) {
      shape = {m.rows, row_bytes(to, m.cols)};
      metadata[wtype_metadata_key(name)] = wtype_name(to);
    }
    out.push_back({name, file_dtype(to), shape, bytes.back().data(), bytes.back().size()});
  };
  auto norm = [&](const std::string& name, const float* v) {
    add(name, MatrixRef{WType::F32, v, 1, w.hidden}, WType::F32, false);
  };
  auto matrix_type = [&](const MatrixRef& m, const TensorSlot& slot) { return type ? tensor_type(*type, slot) : m.type; };
  add(kEmbedName, w.embed, matrix_type(w.embed, embed_slot(c)), true);
  for (int64_t l = 0; l < static_cast<int64_t>(w.layers.size()); ++l) {
    norm(layer_norm_name(l, false), w.input_norm(l));
    for (int v = 0; v < kLayerVectors; ++v) {
      const std::vector<float>& x = w.vectors[l][v];
      if (!x.empty())
        add(layer_vector_name(l, static_cast<LayerVector>(v)),
            MatrixRef{WType::F32, x.data(), 1, static_cast<int64_t>(x.size())}, WType::F32, false);
    }
    // A family's fused matrices are written fused, as its Hugging Face files
    // hold them (Phi-3's qkv_proj and gate_up_proj): the parts' rows in turn.
    std::map<std::string, std::vector<int>> fused;
    for (LayerMatrix lm : layer_matrices(c, l)) {
      const int m = static_cast<int>(lm);
      const auto part = fused_part(l, lm, c);
      if (!part) {
        add(layer_matrix_name(l, static_cast<LayerMatrix>(m)), w.layers[l][m],
            matrix_type(w.layers[l][m], layer_slot(c, l, static_cast<LayerMatrix>(m))), true);
        continue;
      }
      std::vector<int>& parts = fused[part->name];
      parts.push_back(m);
      int64_t rows = 0;
      for (int p : parts) rows += w.layers[l][p].rows;
      if (rows < part->fused_rows) continue;
      std::sort(parts.begin(), parts.end(), [&](int a, int b) {
        return fused_part(l, static_cast<LayerMatrix>(a), c)->row0 < fused_part(l, static_cast<LayerMatrix>(b), c)->row0;
      });
      const WType to = matrix_type(w.layers[l][parts[0]], layer_slot(c, l, static_cast<LayerMatrix>(parts[0])));
      WeightBytes all;
      for (int p : parts) {
        const WeightBytes b = plain_bytes(w.layers[l][p], to, layer_matrix_name(l, static_cast<LayerMatrix>(p)));
        all.insert(all.end(), b.begin(), b.end());
      }
      bytes.push_back(std::move(all));
      const int64_t cols = w.layers[l][parts[0]].cols;
      std::vector<int64_t> shape{rows, cols};
      if (is_block_type(to)) {
        shape = {rows, row_bytes(to, cols)};
        metadata[wtype_metadata_key(part->name)] = wtype_name(to);
      }
      out.push_back({part->name, file_dtype(to), shape, bytes.back().data(), bytes.back().size()});
    }
    norm(layer_norm_name(l, true), w.post_norm(l));
  }
  norm(kFinalNormName, w.final_norm());
  if (!c.tie_word_embeddings) add(kHeadName, w.lm_head, matrix_type(w.lm_head, head_slot(c)), true);
  write_safetensors((fs::path(dir) / "model.safetensors").string(), out, metadata);
  const fs::path cfg = fs::path(dir) / "config.json";
  std::ofstream f(cfg);
  f << config_json;
  if (!f) throw Error(cfg.string() + ": write failed");
}

uint64_t stored_weight_bytes(const TensorLocator& locate, const ModelConfig& c) {
  const int64_t H = c.hidden_size;
  uint64_t n = locate(kEmbedName, {c.vocab_size, H}).bytes;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (bool post : {false, true}) n += locate(layer_norm_name(l, post), {H}).bytes;
    for (int v = 0; v < kLayerVectors; ++v)
      if (const int64_t size = layer_vector_size(static_cast<LayerVector>(v), c, l))
        n += locate(layer_vector_name(l, static_cast<LayerVector>(v)), {size}).bytes;
    // A fused matrix's parts are row slices of it that add up to it.
    for (LayerMatrix lm : layer_matrices(c, l)) n += locate(layer_matrix_name(l, lm), layer_matrix_shape(lm, c, l)).bytes;
  }
  n += locate(kFinalNormName, {H}).bytes;
  if (!c.tie_word_embeddings) n += locate(kHeadName, {c.vocab_size, H}).bytes;
  if (const int64_t P = c.per_layer_input_size) {
    const int64_t L = c.num_hidden_layers;
    n += locate(kPerLayerEmbedName, {c.vocab_size, L * P}).bytes + locate(kPerLayerProjName, {L * P, H}).bytes +
         locate(kPerLayerNormName, {P}).bytes;
  }
  return n;
}

std::vector<float> load_float_values(const TensorInfo& t) {
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    throw Error(t.file + ": tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) + "; weights must be F32, F16 or BF16");
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::F32) {
      std::memcpy(&out[i], t.data + i * 4, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, t.data + i * 2, 2);
      out[i] = t.dtype == DType::F16 ? half_to_float(bits) : bf16_to_float(bits);
    }
    if (!std::isfinite(out[i])) throw Error(t.file + ": tensor '" + t.name + "' contains NaN or infinite values");
  }
  return out;
}

}  // namespace splitspec

#include "common/engine/model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <fstream>

#include "common/util/error.h"
#include "common/engine/kernels.h"
#include "common/engine/linear.h"
#include "common/engine/quant.h"
#include "common/engine/safetensors.h"

namespace splitspec {

namespace {

at::ScalarType to_scalar_type(DType d) {
  switch (d) {
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    default: return at::kFloat;
  }
}

// Float tensors as the weight set's sources: rows x cols fp32 (contiguous
// copies kept alive in `keep` until the set has copied them).
WeightSource tensor_source(const ModelConfig& config, const ModelWeights& weights, std::vector<at::Tensor>& keep) {
  std::map<std::string, at::Tensor> by_name;
  for (auto& [name, t] : named_weights(config, weights)) by_name[name] = t;
  return [by_name = std::move(by_name), &keep](const std::string& name, const std::vector<int64_t>& shape) {
    auto it = by_name.find(name);
    if (it == by_name.end() || !it->second.defined()) throw Error("weights: missing tensor '" + name + "'");
    if (it->second.sizes().vec() != shape)
      throw Error("weights: tensor '" + name + "' has shape " + shape_str(it->second.sizes().vec()) + ", expected " +
                  shape_str(shape));
    keep.push_back(it->second.detach().to(at::kFloat).contiguous());
    return MatrixRef{WType::F32, keep.back().data_ptr<float>(), shape.size() == 2 ? shape[0] : 1, shape.back()};
  };
}

}  // namespace

at::Tensor load_float_tensor(const TensorInfo& t) {
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    throw Error(t.file + ": tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) + "; weights must be F32, F16 or BF16");
  auto view = at::from_blob(const_cast<uint8_t*>(t.data), t.shape, at::TensorOptions().dtype(to_scalar_type(t.dtype)));
  at::Tensor out = view.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  if (!at::isfinite(out).all().item<bool>())
    throw Error(t.file + ": tensor '" + t.name + "' contains NaN or infinite values");
  return out;
}

Model::Model(ModelConfig config, WeightSet weights, std::string name)
    : config_(std::move(config)), weights_(std::move(weights)), name_(std::move(name)) {
  c10::InferenceMode guard;
  rope_tables(config_, rope_cos_, rope_sin_);
}

void rope_tables(const ModelConfig& c, at::Tensor& cos, at::Tensor& sin) {
  const auto dbl = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor inv_freq = at::pow(c.rope_theta, -at::arange(0, c.head_dim / 2, dbl) * 2.0 / c.head_dim);
  const at::Tensor angles = at::outer(at::arange(0, c.max_position_embeddings, dbl), inv_freq);
  cos = angles.cos().to(at::kFloat);
  sin = angles.sin().to(at::kFloat);
}

std::shared_ptr<Model> Model::load(const std::string& dir, std::optional<WType> type) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw Error(dir + ": model directory does not exist");
  ModelConfig c = load_model_config(dir);
  return std::shared_ptr<Model>(new Model(c, load_weight_set(dir, c, type), fs::path(dir).filename().string()));
}

std::shared_ptr<Model> Model::load_streamed(const std::string& dir, const StreamOptions& options) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw Error(dir + ": model directory does not exist");
  ModelConfig c = load_model_config(dir);
  auto stream = std::make_unique<StreamedWeights>(dir, c, options);
  std::shared_ptr<Model> m(new Model(c, WeightSet{}, fs::path(dir).filename().string()));
  m->stream_ = std::move(stream);
  return m;
}

std::shared_ptr<Model> Model::from_weights(const ModelConfig& c, const ModelWeights& src, std::string name, WType type) {
  c.validate(name);
  c10::InferenceMode guard;
  std::vector<at::Tensor> keep;
  WeightSet w = build_weight_set(c, tensor_source(c, src, keep), type, false, name);
  return std::shared_ptr<Model>(new Model(c, std::move(w), std::move(name)));
}

std::shared_ptr<Model> Model::random(const ModelConfig& c, uint64_t seed) {
  c.validate("random model config");
  c10::InferenceMode guard;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto normal = [&](std::vector<int64_t> shape) {
    return at::normal(0.0, 0.02, shape, gen, at::TensorOptions().dtype(at::kFloat));
  };
  ModelWeights w;
  for_each_weight(c, w, [&](const std::string& name, const std::vector<int64_t>& shape, at::Tensor& t) {
    // Norm gains near 1 but not exactly, so tests notice a norm applied wrongly.
    t = shape.size() == 1 ? 1.0 + normal(shape) * 5.0 : normal(shape);
  });
  return from_weights(c, w, "random-" + std::to_string(seed));
}

void for_each_weight(const ModelConfig& c, ModelWeights& w, const WeightVisitor& f) {
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t q = c.num_attention_heads * D, kv = c.num_key_value_heads * D;
  f("model.embed_tokens.weight", {c.vocab_size, H}, w.embed);
  w.layers.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    f(p + "input_layernorm.weight", {H}, lw.input_norm);
    f(p + "self_attn.q_proj.weight", {q, H}, lw.q_proj);
    f(p + "self_attn.k_proj.weight", {kv, H}, lw.k_proj);
    f(p + "self_attn.v_proj.weight", {kv, H}, lw.v_proj);
    f(p + "self_attn.o_proj.weight", {H, q}, lw.o_proj);
    f(p + "post_attention_layernorm.weight", {H}, lw.post_norm);
    f(p + "mlp.gate_proj.weight", {I, H}, lw.gate_proj);
    f(p + "mlp.up_proj.weight", {I, H}, lw.up_proj);
    f(p + "mlp.down_proj.weight", {H, I}, lw.down_proj);
  }
  f("model.norm.weight", {H}, w.final_norm);
  if (c.tie_word_embeddings)
    w.lm_head = w.embed;
  else
    f("lm_head.weight", {c.vocab_size, H}, w.lm_head);
}

std::vector<std::pair<std::string, at::Tensor>> named_weights(const ModelConfig& config, const ModelWeights& w) {
  ModelWeights handles = w;  // tensors are shared handles: nothing is copied
  std::vector<std::pair<std::string, at::Tensor>> named;
  for_each_weight(config, handles, [&](const std::string& name, const std::vector<int64_t>&, at::Tensor& t) {
    named.emplace_back(name, t);
  });
  return named;
}

ModelWeights copy_weights(const ModelConfig& config, const ModelWeights& src,
                          const std::function<at::Tensor(const at::Tensor&)>& copy) {
  ModelWeights out = src;
  for_each_weight(config, out, [&](const std::string&, const std::vector<int64_t>&, at::Tensor& t) { t = copy(t); });
  return out;
}

void save_model(const ModelConfig& config, const ModelWeights& weights, const std::string& dir, WType type) {
  c10::InferenceMode guard;
  std::vector<at::Tensor> keep;
  save_weight_set(build_weight_set(config, tensor_source(config, weights, keep), std::nullopt, true, dir), config, dir,
                  type);
}

void Model::save(const std::string& dir, std::optional<WType> type) const {
  if (stream_) throw Error("save: " + name_ + " is streamed from disk; convert its directory instead");
  save_weight_set(weights_, config_, dir, type);
}

WType Model::weight_type() const {
  if (stream_) return stream_->weight_type();
  return weights_.type();
}

ModelWeights Model::float_weights() const {
  if (stream_) throw Error("float_weights: " + name_ + " is streamed from disk");
  c10::InferenceMode guard;
  auto matrix = [](const MatrixRef& m) {
    at::Tensor t = at::empty({m.rows, m.cols}, at::TensorOptions().dtype(at::kFloat));
    dequantize_rows(m, 0, m.rows, t.data_ptr<float>());
    return t;
  };
  auto norm = [&](const float* v) {
    return at::from_blob(const_cast<float*>(v), {config_.hidden_size}, at::TensorOptions().dtype(at::kFloat)).clone();
  };
  ModelWeights w;
  w.embed = matrix(weights_.embed);
  w.layers.resize(config_.num_hidden_layers);
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    const auto& m = weights_.layers[l];
    lw.input_norm = norm(weights_.input_norm(l));
    lw.q_proj = matrix(m[0]);
    lw.k_proj = matrix(m[1]);
    lw.v_proj = matrix(m[2]);
    lw.o_proj = matrix(m[3]);
    lw.post_norm = norm(weights_.post_norm(l));
    lw.gate_proj = matrix(m[4]);
    lw.up_proj = matrix(m[5]);
    lw.down_proj = matrix(m[6]);
  }
  w.final_norm = norm(weights_.final_norm());
  w.lm_head = config_.tie_word_embeddings ? w.embed : matrix(weights_.lm_head);
  return w;
}

const float* Model::final_norm() const { return stream_ ? stream_->final_norm() : weights_.final_norm(); }

at::Tensor Model::head_rows(const std::vector<int64_t>& ids) const {
  if (stream_) throw Error("head_rows: " + name_ + " is streamed from disk");
  at::Tensor out = at::empty({static_cast<int64_t>(ids.size()), config_.hidden_size}, at::TensorOptions().dtype(at::kFloat));
  for (size_t i = 0; i < ids.size(); ++i)
    dequantize_rows(weights_.lm_head, ids[i], ids[i] + 1, out.data_ptr<float>() + i * config_.hidden_size);
  return out;
}

size_t Model::weight_bytes() const {
  if (stream_) return stream_->stats().weight_bytes;
  return weights_.bytes();
}

KVCache Model::new_cache(int64_t capacity) const {
  return KVCache(config_, capacity > 0 ? capacity : config_.max_position_embeddings);
}

ForwardResult Model::forward(const ForwardRequest& req, KVCache& cache) const {
  return std::move(forward_batch({{&req, &cache}})[0]);
}

namespace {

// One sequence of a batch, checked, with its place in the batch's rows.
struct Sequence {
  const ForwardRequest* req;
  KVCache* cache;
  int64_t offset;  // first row in the batch
  int64_t n;
  std::vector<std::vector<int32_t>> visible;  // row i attends to these cache slots, increasing
};

Sequence check_sequence(const ModelConfig& c, const std::string& name, const ForwardRequest& req, KVCache& cache,
                        int64_t offset) {
  const int64_t n = static_cast<int64_t>(req.tokens.size());
  const int64_t past = cache.size();
  const int64_t total = past + n;
  if (n == 0) throw Error("forward: no tokens given");
  if (!cache.fits(c))
    throw Error("forward: the KV cache was made for a model of another shape than " + name);
  if (total > cache.capacity())
    throw Error("forward: context of " + std::to_string(total) + " tokens exceeds the KV cache capacity of " +
                std::to_string(cache.capacity()));
  for (int32_t t : req.tokens)
    if (t < 0 || t >= c.vocab_size)
      throw Error("forward: token id " + std::to_string(t) + " outside the vocabulary [0, " +
                  std::to_string(c.vocab_size) + ")");
  if (!req.positions.empty() && static_cast<int64_t>(req.positions.size()) != n)
    throw Error("forward: " + std::to_string(req.positions.size()) + " positions for " + std::to_string(n) + " tokens");
  for (int64_t p : req.positions)
    if (p < 0 || p >= c.max_position_embeddings)
      throw Error("forward: position " + std::to_string(p) + " outside [0, " +
                  std::to_string(c.max_position_embeddings) + ")");
  if (req.logits_rows)
    for (int64_t r : *req.logits_rows)
      if (r < 0 || r >= n) throw Error("forward: logits row " + std::to_string(r) + " outside the " + std::to_string(n) + " new tokens");
  for (int64_t l : req.hidden_layers)
    if (l < 0 || l >= c.num_hidden_layers) throw Error("forward: hidden layer " + std::to_string(l) + " does not exist");

  Sequence s{&req, &cache, offset, n, std::vector<std::vector<int32_t>>(n)};
  if (req.mask.defined()) {
    if (req.mask.dim() != 2 || req.mask.size(0) != n || req.mask.size(1) != total)
      throw Error("forward: mask must be [" + std::to_string(n) + ", " + std::to_string(total) + "]");
    const at::Tensor m = req.mask.to(at::kBool).contiguous();
    const bool* mp = m.data_ptr<bool>();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < total; ++j)
        if (mp[i * total + j]) s.visible[i].push_back(static_cast<int32_t>(j));
      if (s.visible[i].empty()) throw Error("forward: mask row " + std::to_string(i) + " attends to nothing");
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      s.visible[i].resize(past + i + 1);
      std::iota(s.visible[i].begin(), s.visible[i].end(), 0);
    }
  }
  return s;
}

}  // namespace

std::vector<ForwardResult> Model::forward_batch(const std::vector<BatchItem>& items) const {
  const ModelConfig& c = config_;
  if (items.empty()) throw Error("forward: an empty batch");
  std::vector<Sequence> seqs;
  int64_t n = 0;  // rows of the whole batch
  for (size_t b = 0; b < items.size(); ++b) {
    for (size_t a = 0; a < b; ++a)
      if (items[a].cache == items[b].cache) throw Error("forward: two sequences of one batch share a KV cache");
    seqs.push_back(check_sequence(c, name_, *items[b].request, *items[b].cache, n));
    n += seqs.back().n;
  }

  c10::InferenceMode guard;
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  // Each row's RoPE angles, copied from the tables (contiguous [n, D/2]).
  const int64_t half = c.head_dim / 2;
  at::Tensor cos = at::empty({n, half}, at::TensorOptions().dtype(at::kFloat));
  at::Tensor sin = at::empty({n, half}, at::TensorOptions().dtype(at::kFloat));
  std::vector<int64_t> ids;
  ids.reserve(n);
  for (const Sequence& s : seqs) {
    const int64_t past = s.cache->size();
    for (int64_t i = 0; i < s.n; ++i) {
      const int64_t p = s.req->positions.empty() ? past + i : s.req->positions[i];
      const int64_t row = s.offset + i;
      std::memcpy(cos.data_ptr<float>() + row * half, rope_cos_.data_ptr<float>() + p * half, half * sizeof(float));
      std::memcpy(sin.data_ptr<float>() + row * half, rope_sin_.data_ptr<float>() + p * half, half * sizeof(float));
    }
    ids.insert(ids.end(), s.req->tokens.begin(), s.req->tokens.end());
  }
  // A streamed forward passes over every weight unit once, even when cut
  // short by an exception, so the next one starts in step.
  struct Pass {
    StreamedWeights* s;
    explicit Pass(StreamedWeights* s) : s(s) { if (s) s->begin_forward(); }
    ~Pass() { if (s) s->end_forward(); }
  } pass(stream_.get());
  at::Tensor x = at::empty({n, c.hidden_size}, at::TensorOptions().dtype(at::kFloat));
  if (stream_) {
    stream_->embed(ids.data(), n, x.data_ptr<float>());
  } else {
    for (int64_t i = 0; i < n; ++i) dequantize_rows(weights_.embed, ids[i], ids[i] + 1, x.data_ptr<float>() + i * c.hidden_size);
  }

  const int64_t H = c.hidden_size, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, D = c.head_dim;
  const int64_t I = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  auto buf = [](int64_t rows, int64_t cols) { return at::empty({rows, cols}, at::TensorOptions().dtype(at::kFloat)); };
  at::Tensor h = buf(n, H), q = buf(n, Hq * D), k = buf(n, Hkv * D), v = buf(n, Hkv * D), attn = buf(n, Hq * D);
  at::Tensor delta = buf(n, H), gate = buf(n, I), up = buf(n, I);
  auto f = [](const at::Tensor& t) { return t.data_ptr<float>(); };

  std::vector<ForwardResult> out(seqs.size());
  // Each matrix is taken just before its use and given back right after,
  // so a streamed model can reuse its read buffer at once.
  auto matrix = [&](int64_t l, LayerMatrix m) -> MatrixRef {
    if (stream_) return stream_->acquire(l, m);
    return weights_.layers[l][static_cast<int>(m)];
  };
  auto done = [&] {
    if (stream_) stream_->release();
  };
  // Every kernel but attention treats rows independently and is
  // batch-invariant, so it runs once over the whole batch; attention reads
  // each sequence's own cache under its own mask.
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const float* input_norm = stream_ ? stream_->input_norm(l) : weights_.input_norm(l);
    const float* post_norm = stream_ ? stream_->post_norm(l) : weights_.post_norm(l);
    kernels::rms_norm(f(x), n, H, input_norm, eps, f(h));
    kernels::linear(f(h), n, matrix(l, LayerMatrix::kQ), f(q));
    done();
    kernels::linear(f(h), n, matrix(l, LayerMatrix::kK), f(k));
    done();
    kernels::linear(f(h), n, matrix(l, LayerMatrix::kV), f(v));
    done();
    kernels::rope(f(q), n, Hq, D, f(cos), f(sin));
    kernels::rope(f(k), n, Hkv, D, f(cos), f(sin));
    for (const Sequence& s : seqs) {
      s.cache->write_rows(l, f(k) + s.offset * Hkv * D, f(v) + s.offset * Hkv * D, s.n);
      const at::Tensor keys = s.cache->keys(l, s.n);  // [Hkv, total, D], head stride = capacity * D
      const at::Tensor vals = s.cache->values(l, s.n);
      kernels::attention(f(q) + s.offset * Hq * D, f(keys), f(vals), {s.n, Hq, Hkv, D, keys.stride(0)}, s.visible,
                         scale, f(attn) + s.offset * Hq * D);
    }
    kernels::linear(f(attn), n, matrix(l, LayerMatrix::kO), f(delta));
    done();
    kernels::add_inplace(f(x), f(delta), n * H);
    kernels::rms_norm(f(x), n, H, post_norm, eps, f(h));
    kernels::linear(f(h), n, matrix(l, LayerMatrix::kGate), f(gate));
    done();
    kernels::linear(f(h), n, matrix(l, LayerMatrix::kUp), f(up));
    done();
    kernels::silu_mul(f(gate), f(up), n * I, f(gate));
    kernels::linear(f(gate), n, matrix(l, LayerMatrix::kDown), f(delta));
    done();
    kernels::add_inplace(f(x), f(delta), n * H);
    for (size_t b = 0; b < seqs.size(); ++b) {
      const Sequence& s = seqs[b];
      const ForwardRequest& req = *s.req;
      if (req.hidden_layers.empty() && !req.on_layer) continue;
      const at::Tensor rows = x.narrow(0, s.offset, s.n);
      for (int64_t hl : req.hidden_layers)
        if (hl == l) out[b].hidden[l] = rows.clone();
      if (req.on_layer) req.on_layer(l, rows);
    }
  }
  for (const Sequence& s : seqs) s.cache->commit(s.n);

  // The final norm and the head, once over every sequence's logits rows.
  std::vector<int64_t> rows;
  std::vector<int64_t> counts;
  for (const Sequence& s : seqs) {
    const size_t before = rows.size();
    if (s.req->logits_rows) {
      for (int64_t r : *s.req->logits_rows) rows.push_back(s.offset + r);
    } else {
      for (int64_t i = 0; i < s.n; ++i) rows.push_back(s.offset + i);
    }
    counts.push_back(static_cast<int64_t>(rows.size() - before));
  }
  at::Tensor normed, logits;
  if (rows.empty()) {
    // Only prefills: no row wants logits.
    normed = at::empty({0, c.hidden_size}, at::TensorOptions().dtype(at::kFloat));
    // A streamed model still passes over its head, to stay in step.
    logits = stream_ ? streamed_head_logits(normed) : at::empty({0, c.vocab_size}, at::TensorOptions().dtype(at::kFloat));
  } else {
    const at::Tensor picked = x.index_select(0, at::from_blob(rows.data(), {static_cast<int64_t>(rows.size())}, i64));
    normed = final_norm_rows(picked);
    logits = stream_ ? streamed_head_logits(normed) : head_logits_normed(normed);
  }
  int64_t first = 0;
  for (size_t b = 0; b < seqs.size(); ++b) {
    // A lone sequence keeps the whole tensors; a batch's are split by copy so
    // that no result holds the others' memory.
    if (seqs.size() == 1) {
      out[b].logits = logits;
      if (seqs[b].req->final_hidden) out[b].final_hidden = normed;
    } else {
      out[b].logits = logits.narrow(0, first, counts[b]).clone();
      if (seqs[b].req->final_hidden) out[b].final_hidden = normed.narrow(0, first, counts[b]).clone();
    }
    first += counts[b];
  }
  return out;
}

at::Tensor Model::final_norm_rows(const at::Tensor& hidden) const {
  const ModelConfig& c = config_;
  const at::Tensor rows = hidden.contiguous();
  const int64_t m = rows.size(0), H = c.hidden_size;
  at::Tensor normed = at::empty({m, H}, at::TensorOptions().dtype(at::kFloat));
  kernels::rms_norm(rows.data_ptr<float>(), m, H, final_norm(),
                    static_cast<float>(c.rms_norm_eps), normed.data_ptr<float>());
  return normed;
}

at::Tensor Model::streamed_head_logits(const at::Tensor& normed) const {
  const ModelConfig& c = config_;
  const int64_t m = normed.size(0);
  auto opts = at::TensorOptions().dtype(at::kFloat);
  at::Tensor logits = at::empty({m, c.vocab_size}, opts);
  // Slice by slice of vocabulary rows; every logit is the same dot product
  // the whole-matrix call computes, so the values are bitwise the same.
  at::Tensor part;
  for (int64_t chunk = 0; chunk < stream_->head_chunks(); ++chunk) {
    int64_t row0 = 0, count = 0;
    const MatrixRef w = stream_->acquire_head(chunk, &row0, &count);
    if (m > 0) {
      if (!part.defined() || part.size(1) != count) part = at::empty({m, count}, opts);
      kernels::linear(normed.data_ptr<float>(), m, w, part.data_ptr<float>());
      logits.narrow(1, row0, count).copy_(part);
    }
    stream_->release();
  }
  return logits;
}

at::Tensor Model::head_logits(const at::Tensor& hidden) const {
  if (stream_) throw Error("head_logits: " + name_ + " is streamed from disk; its head runs inside forward()");
  return head_logits_normed(final_norm_rows(hidden));
}

at::Tensor Model::head_logits_normed(const at::Tensor& normed) const {
  const ModelConfig& c = config_;
  at::Tensor logits = at::empty({normed.size(0), c.vocab_size}, at::TensorOptions().dtype(at::kFloat));
  kernels::linear(normed.data_ptr<float>(), normed.size(0), weights_.lm_head, logits.data_ptr<float>());
  return logits;
}

}  // namespace splitspec

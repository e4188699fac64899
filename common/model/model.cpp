#include "common/model/model.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <random>

#include "common/kernels/kernels.h"
#include "common/model/delta_rule.h"
#include "common/model/digest_cache.h"
#include "common/model/family.h"
#include "common/kernels/linear.h"
#include "common/kernels/parallel.h"
#include "common/kernels/quant.h"
#include "common/kernels/thread_choice.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/vocab.h"
#include "common/util/error.h"
#include "common/model/gguf_model.h"
#include "common/weights/safetensors.h"

namespace splitspec {

Model::Model(ModelConfig config, WeightSet weights, std::string name)
    : config_(std::move(config)), weights_(std::move(weights)), name_(std::move(name)) {
  rope_tables(config_, rope_cos_, rope_sin_);
  if (config_.sliding_window_pattern > 0) rope_tables(config_, local_cos_, local_sin_, true);
}

void rope_tables(const ModelConfig& c, std::vector<float>& cos, std::vector<float>& sin, bool local) {
  const int64_t rotary = local ? c.local_rotary_dims() : c.rotary_dims(), half = rotary / 2;
  const std::vector<float>& divisors = local ? std::vector<float>{} : c.rope_divisors();
  const double theta = local ? c.rope_local_theta : c.rope_theta;
  const double factor = local ? 1.0 : c.rope_attention_factor;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(theta, -static_cast<double>(i) * 2.0 / static_cast<double>(rotary));
    if (!divisors.empty()) inv_freq[i] /= static_cast<double>(divisors[i]);
  }
  cos.resize(c.max_position_embeddings * half);
  sin.resize(cos.size());
  for (int64_t p = 0; p < c.max_position_embeddings; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq[i];
      cos[p * half + i] = static_cast<float>(std::cos(angle) * factor);
      sin[p * half + i] = static_cast<float>(std::sin(angle) * factor);
    }
}

std::string model_side_dir(const std::string& model_path) {
  namespace fs = std::filesystem;
  if (!fs::is_regular_file(model_path)) return model_path;
  fs::path p(model_path);
  return p.replace_extension(".splitspec").string();
}

namespace {

// Generation ends at every end-of-generation token of the model's tokenizer
// (Llama 3's <|eot_id|>, Qwen's <|im_end|>, Phi-3's <|end|>), not only at the
// one EOS id its config names.
void add_eog(ModelConfig& c, const std::vector<int32_t>& eog) {
  for (int32_t id : eog)
    if (id < c.vocab_size && !is_end_of_generation(c, id)) c.eos_token_ids.push_back(id);
  if (c.eos_token_id < 0 && !c.eos_token_ids.empty()) c.eos_token_id = c.eos_token_ids[0];
}


// A path that is not a GGUF file must be a model directory.
void require_model_directory(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(path))
    throw Error(path + (fs::exists(path) ? ": neither a model directory nor a GGUF file"
                                         : ": model directory does not exist (nor a GGUF file of that name)"));
}

}  // namespace

ModelSource open_model_source(const std::string& path) {
  namespace fs = std::filesystem;
  ModelSource src;
  src.copies = std::make_unique<std::map<std::string, WeightBytes>>();
  if (fs::is_regular_file(path) && is_gguf_file(path)) {
    auto f = std::make_shared<GgufFile>(path);
    src.config = gguf_model_config(*f);
    apply_context_limit(src.config);
    // The vocabulary of the file already open, not opened again.
    if (f->has("tokenizer.ggml.model")) add_eog(src.config, Vocab::from_gguf(*f).eog_ids());
    // The metadata and the vocabulary read for its end-of-generation ids
    // (128K pieces and their merges) are done with: free them, and hand their
    // heap back, before the weights come in.
    f->forget_metadata();
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
    src.name = fs::path(path).stem().string();
    src.where = path;
    src.tensors = gguf_weight_source(*f, src.config, *src.copies);
    src.release = gguf_copied_releaser(*f, src.config);
    src.mapping = std::move(f);
    return src;
  }
  require_model_directory(path);
  src.config = load_model_config(path);
  apply_context_limit(src.config);
  if (tokenizer_available(path)) add_eog(src.config, Tokenizer(path).eog_ids());
  auto st = std::make_shared<const SafetensorsModel>(path);
  src.name = fs::path(path).filename().string();
  src.where = st->description();
  src.tensors = safetensors_source(*st, src.config, src.copies.get());
  src.release = safetensors_copied_releaser(*st, src.config);
  src.mapping = std::move(st);
  return src;
}

std::shared_ptr<Model> Model::load(const std::string& path, std::optional<WType> type) {
  ModelSource src = open_model_source(path);
  WeightSet w = build_weight_set(src.config, src.tensors, type, true, src.where, [&](const std::string& name) {
    // Copied (packed or converted): neither the file's pages nor a permuted
    // copy of them are read again, and the load's peak stays near the
    // weights' size.
    src.release(name);
    src.copies->erase(name);
  });
  for (auto& [name, k] : *src.copies) w.owned.push_back(std::move(k));
  // Unmapped when nothing was borrowed.
  if (w.borrowed) w.mapping = std::move(src.mapping);
  return std::shared_ptr<Model>(new Model(src.config, std::move(w), src.name));
}

std::shared_ptr<Model> Model::load_streamed(const std::string& path, const StreamOptions& options) {
  namespace fs = std::filesystem;
  ModelConfig c;
  std::unique_ptr<StreamedWeights> stream;
  if (fs::is_regular_file(path) && is_gguf_file(path)) {
    const GgufFile f(path);
    c = gguf_model_config(f);
    apply_context_limit(c);
    if (f.has("tokenizer.ggml.model")) add_eog(c, Vocab::from_gguf(f).eog_ids());
    stream = std::make_unique<StreamedWeights>(gguf_locator(f, c), c, options);
  } else {
    require_model_directory(path);
    c = load_model_config(path);
    if (family_of(c).hf_tensor)
      throw Error(path + ": a " + c.architecture + " directory is not streamed yet (its tensors are converted as they "
                  "load); load it in memory, or stream its GGUF file");
    apply_context_limit(c);
    if (tokenizer_available(path)) add_eog(c, Tokenizer(path).eog_ids());
    const SafetensorsModel st(path);
    stream = std::make_unique<StreamedWeights>(safetensors_locator(st, c), c, options);
  }
  std::shared_ptr<Model> m(new Model(c, WeightSet{}, fs::is_directory(path) ? fs::path(path).filename().string()
                                                                            : fs::path(path).stem().string()));
  m->stream_ = std::move(stream);
  m->stream_dir_ = path;
  m->provider_ = m->stream_.get();
  return m;
}

uint64_t stored_weight_bytes(const std::string& path) {
  if (std::filesystem::is_regular_file(path) && is_gguf_file(path)) {
    const GgufFile f(path);
    const ModelConfig c = gguf_model_config(f);
    return stored_weight_bytes(gguf_locator(f, c), c);
  }
  require_model_directory(path);
  const ModelConfig c = load_model_config(path);
  const SafetensorsModel st(path);
  return stored_weight_bytes(safetensors_locator(st, c), c);
}

std::shared_ptr<Model> Model::from_weight_set(const ModelConfig& c, WeightSet weights, std::string name) {
  c.validate(name);
  return std::shared_ptr<Model>(new Model(c, std::move(weights), std::move(name)));
}

std::shared_ptr<Model> Model::random(const ModelConfig& c, uint64_t seed, WType type, float scale) {
  c.validate("random model config");
  std::mt19937_64 engine(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<std::vector<float>> keep;
  auto source = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
    keep.emplace_back(static_cast<size_t>(rows * cols));
    // Norm gains near 1 but not exactly, so tests notice a norm applied
    // wrongly; a delta-rule layer's A negative, as -exp(A_log) is, so its
    // states decay.
    const float sign = name.size() > 2 && name.compare(name.size() - 2, 2, ".A") == 0 ? -1.0f : 1.0f;
    for (float& v : keep.back()) v = shape.size() == 1 ? sign * (1.0f + normal(engine) * 5.0f) : normal(engine);
    return MatrixRef{WType::F32, keep.back().data(), rows, cols};
  };
  std::string name = "random-" + std::to_string(seed);
  return from_weight_set(c, build_weight_set(c, source, type, false, name), name);
}

void Model::save(const std::string& dir, std::optional<WType> type) const {
  if (stream_) throw Error("save: " + name_ + " is streamed from disk; convert its directory instead");
  save_weight_set(weights_, config_, dir, type);
}

WType Model::weight_type() const {
  if (stream_) return stream_->weight_type();
  return weights_.type();
}

std::string Model::weights_digest() const {
  if (!stream_) return weights_.digest();
  // Streamed: the same definition over the files as stored (a streamed model
  // is never converted), read once and kept beside the model.
  return cached_weights_digest(stream_dir_, [&] { return source_digest(config_, open_model_source(stream_dir_).tensors); });
}

const float* Model::final_norm() const { return provider_->final_norm(); }

Rows Model::head_rows(const std::vector<int64_t>& ids) const {
  if (stream_) throw Error("head_rows: " + name_ + " is streamed from disk");
  Rows out(static_cast<int64_t>(ids.size()), config_.hidden_size);
  for (size_t i = 0; i < ids.size(); ++i) dequantize_rows(weights_.lm_head, ids[i], ids[i] + 1, out.row(i));
  return out;
}

size_t Model::weight_bytes() const {
  if (stream_) return stream_->stats().weight_bytes;
  return weights_.bytes();
}

KVCache Model::new_cache(int64_t capacity) const {
  return KVCache(config_, capacity > 0 ? capacity : config_.max_position_embeddings, kv_type_, state_window_);
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
  // The same within the sliding window, for a model with local layers.
  std::vector<std::vector<int32_t>> visible_local;
  // With delta-rule layers: the entries whose state each row starts from,
  // and the rows whose end state is kept (delta_rule.h).
  std::vector<int64_t> before;
  std::vector<uint8_t> save;
};

// A delta-rule model's rows must each continue one state: a row sees
// exactly what its parent (the last slot it sees before itself) saw, and
// itself, so the rows form chains and trees over the cache (a parent already
// in the cache continues the state kept after it). Fills the
// sequence's `before` and `save`; throws splitspec::Error, the cache
// untouched, for any other mask, or for a parent whose state is not kept.
void plan_states(Sequence& s, int64_t window) {
  window = std::max(window, s.req->rollback_rows);
  const int64_t past = s.cache->size();
  bool chain = true;
  s.before.assign(static_cast<size_t>(s.n), 0);
  for (int64_t i = 0; i < s.n; ++i) {
    const std::vector<int32_t>& vis = s.visible[static_cast<size_t>(i)];
    auto refuse = [&](const std::string& why) {
      throw Error("forward: row " + std::to_string(i) + " of a model with delta-rule layers " + why);
    };
    if (vis.back() != past + i) refuse("must see itself");
    const int64_t parent = vis.size() >= 2 ? vis[vis.size() - 2] : -1;
    if (parent >= past) {
      const std::vector<int32_t>& theirs = s.visible[static_cast<size_t>(parent - past)];
      if (vis.size() != theirs.size() + 1 || !std::equal(theirs.begin(), theirs.end(), vis.begin()))
        refuse("must see exactly what the row it follows sees, and itself (a chain or a tree)");
    } else if (parent >= 0 && !s.cache->states().has(parent + 1)) {
      // A cached entry's state is its own path's (a chain's, or a tree
      // node's that a drafter keeps in its cache).
      refuse("follows entry " + std::to_string(parent) + ", whose recurrent state is not kept");
    }
    s.before[static_cast<size_t>(i)] = parent + 1;
    chain = chain && parent == past + i - 1;
  }
  // A chain's rows are each the next one's start; a rollback needs the last
  // `window` of them (or the request's rollback rows). Any of a tree's nodes
  // may end the accepted path.
  s.save.assign(static_cast<size_t>(s.n), 0);
  for (int64_t i = 0; i < s.n; ++i) s.save[static_cast<size_t>(i)] = !chain || i >= s.n - window;
}

// Of each row's visible slots, those less than `window` positions back. A
// slot before the cache's new entries holds the token at that position (a
// tree's accepted path is compacted so: KVCache::keep); a new one holds the
// request's position for it.
std::vector<std::vector<int32_t>> within_window(const std::vector<std::vector<int32_t>>& visible,
                                                const ForwardRequest& req, int64_t past, int64_t window) {
  auto position = [&](int64_t slot) {
    return slot < past || req.positions.empty() ? slot : req.positions[static_cast<size_t>(slot - past)];
  };
  std::vector<std::vector<int32_t>> out(visible.size());
  for (size_t i = 0; i < visible.size(); ++i) {
    const int64_t p = position(past + static_cast<int64_t>(i));
    for (int32_t s : visible[i])
      if (p - position(s) < window) out[i].push_back(s);
    if (out[i].empty()) throw Error("forward: row " + std::to_string(i) + " sees nothing within the sliding window");
  }
  return out;
}

}  // namespace

std::vector<std::vector<int32_t>> check_forward_request(const ModelConfig& c, const ForwardRequest& req, int64_t past,
                                                        int64_t capacity) {
  const int64_t n = static_cast<int64_t>(req.tokens.size());
  const int64_t total = past + n;
  if (n == 0) throw Error("forward: no tokens given");
  if (total > capacity)
    throw Error("forward: context of " + std::to_string(total) + " tokens exceeds the KV cache capacity of " +
                std::to_string(capacity));
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
  for (int64_t r : req.final_hidden_rows)
    if (r < 0 || r >= n) throw Error("forward: hidden row " + std::to_string(r) + " outside the " + std::to_string(n) + " new tokens");
  if (!req.inputs.empty() && (req.inputs.rows() != n || req.inputs.cols() != c.hidden_size))
    throw Error("forward: inputs must be [" + std::to_string(n) + ", " + std::to_string(c.hidden_size) + "]");
  for (int64_t l : req.hidden_layers)
    if (l < 0 || l >= c.num_hidden_layers) throw Error("forward: hidden layer " + std::to_string(l) + " does not exist");
  for (int64_t l : req.tap_layers)
    if (l < 0 || l >= c.num_hidden_layers) throw Error("forward: tap layer " + std::to_string(l) + " does not exist");

  std::vector<std::vector<int32_t>> visible(n);
  if (!req.mask.empty()) {
    if (req.mask.rows != n || req.mask.cols != total ||
        static_cast<int64_t>(req.mask.allowed.size()) != n * total)
      throw Error("forward: mask must be [" + std::to_string(n) + ", " + std::to_string(total) + "]");
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* row = req.mask.row(i);
      for (int64_t j = 0; j < total; ++j)
        if (row[j]) visible[i].push_back(static_cast<int32_t>(j));
      if (visible[i].empty()) throw Error("forward: mask row " + std::to_string(i) + " attends to nothing");
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      visible[i].resize(past + i + 1);
      std::iota(visible[i].begin(), visible[i].end(), 0);
    }
  }
  return visible;
}

std::vector<ForwardResult> Model::forward_batch(const std::vector<BatchItem>& items) const {
  const ModelConfig& c = config_;
  if (items.empty()) throw Error("forward: an empty batch");
  std::vector<Sequence> seqs;
  int64_t n = 0;  // rows of the whole batch
  for (size_t b = 0; b < items.size(); ++b) {
    for (size_t a = 0; a < b; ++a)
      if (items[a].cache == items[b].cache) throw Error("forward: two sequences of one batch share a KV cache");
    KVCache& cache = *items[b].cache;
    if (!cache.fits(c)) throw Error("forward: the KV cache was made for a model of another shape than " + name_);
    const ForwardRequest& req = *items[b].request;
    seqs.push_back({&req, &cache, n, static_cast<int64_t>(req.tokens.size()),
                    check_forward_request(c, req, cache.size(), cache.capacity()), {}});
    if (c.sliding_window_pattern > 0)
      seqs.back().visible_local = within_window(seqs.back().visible, req, cache.size(), c.sliding_window);
    if (c.has_recurrent_layers()) plan_states(seqs.back(), cache.states().window());
    n += seqs.back().n;
  }
  for (const Sequence& s : seqs)
    if (c.has_recurrent_layers()) s.cache->states().begin(s.cache->size());

  // As many threads as the forward's work is worth (kernels::threads_for):
  // a draft's step runs on one, a target's verification on all, unless one
  // times faster on this machine (kernels::ThreadChoice). While other work
  // shares the cores (kernels::cores_shared) the pool runs the forward's
  // jobs alone and keeps watching at their ends; no count is timed or tried.
  const auto started = std::chrono::steady_clock::now();
  const int wanted = kernels::threads_for(c.num_parameters() * n);
  const kernels::ThreadChoice::Pick pick = wanted > 1 && kernels::cores_shared(wanted)
                                               ? kernels::ThreadChoice::Pick{wanted}
                                               : thread_choice_->pick(n, wanted, started);
  const kernels::ScopedThreads threads(pick.threads);

  // Each row's RoPE angles, copied from the tables (contiguous [n, rotary/2]);
  // the local layers' too.
  const int64_t half = c.rotary_dims() / 2, local_half = c.local_rotary_dims() / 2;
  const bool local = c.sliding_window_pattern > 0;
  Rows cos(n, half), sin(n, half), local_cos(local ? n : 0, local_half), local_sin(local ? n : 0, local_half);
  std::vector<int64_t> ids;
  ids.reserve(n);
  for (const Sequence& s : seqs) {
    const int64_t past = s.cache->size();
    for (int64_t i = 0; i < s.n; ++i) {
      const int64_t p = s.req->positions.empty() ? past + i : s.req->positions[i];
      const int64_t row = s.offset + i;
      std::memcpy(cos.row(row), rope_cos_.data() + p * half, half * sizeof(float));
      std::memcpy(sin.row(row), rope_sin_.data() + p * half, half * sizeof(float));
      if (local) {
        std::memcpy(local_cos.row(row), local_cos_.data() + p * local_half, local_half * sizeof(float));
        std::memcpy(local_sin.row(row), local_sin_.data() + p * local_half, local_half * sizeof(float));
      }
    }
    ids.insert(ids.end(), s.req->tokens.begin(), s.req->tokens.end());
  }
  // A streamed forward passes over every weight unit once, even when cut
  // short by an exception, so the next one starts in step.
  WeightProvider& w = *provider_;
  struct Pass {
    WeightProvider& w;
    explicit Pass(WeightProvider& w) : w(w) { w.begin_forward(); }
    ~Pass() { w.end_forward(); }
  } pass(w);
  Rows x(n, c.hidden_size);
  w.embed(ids.data(), n, x.data());
  if (c.scale_embeddings) {
    // Gemma's sqrt(hidden_size), in float as llama.cpp and Hugging Face's
    // float32 forward take it.
    const float s = std::sqrt(static_cast<float>(c.hidden_size));
    for (int64_t i = 0; i < n * c.hidden_size; ++i) x.data()[i] *= s;
  }
  for (const Sequence& s : seqs)
    if (!s.req->inputs.empty())
      std::memcpy(x.row(s.offset), s.req->inputs.data(), static_cast<size_t>(s.n * c.hidden_size) * sizeof(float));

  // The widest layer's sizes, for the buffers; each layer uses its own.
  const int64_t H = c.hidden_size, Hq = c.num_attention_heads, Dmax = c.max_head_dim();
  const int64_t Imax = c.max_intermediate_size(), P = c.per_layer_input_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  Rows h(n, H), q(n, Hq * Dmax), k(n, c.max_kv_heads() * Dmax), v(n, c.max_kv_heads() * Dmax), attn(n, Hq * Dmax);
  Rows delta(n, H), gate(n, Imax), up(n, Imax);
  Rows head_normed(c.qk_norm || c.value_norm ? n : 0, Hq * Dmax);
  const std::vector<float> ones(c.value_norm ? static_cast<size_t>(Dmax) : 0, 1.0f);
  // Per-layer inputs, [layer][row][P], and a layer's gated share of them.
  Rows per_layer(P > 0 ? c.num_hidden_layers * n : 0, P), per_layer_gate(P > 0 ? n : 0, P);
  if (P > 0) per_layer_inputs(ids, x, per_layer);
  // The output gate's projection (q and gate interleaved by head), and its gate.
  Rows q_gate(c.attn_output_gate ? n : 0, 2 * Hq * Dmax), attn_gate(c.attn_output_gate ? n : 0, Hq * Dmax);
  // A delta-rule layer's projections and output (delta_rule.h).
  const bool hybrid = c.has_recurrent_layers();
  Rows ssm_qkv(hybrid ? n : 0, c.ssm_channels()), ssm_z(hybrid ? n : 0, c.ssm_value_dim());
  Rows ssm_b(hybrid ? n : 0, c.ssm_value_heads), ssm_a(hybrid ? n : 0, c.ssm_value_heads);
  Rows ssm_out(hybrid ? n : 0, c.ssm_value_dim());
  auto f = [](Rows& t) { return t.data(); };
  // Row by row, so a row's sums do not depend on the batch.
  auto add_bias = [](float* x, int64_t rows, int64_t cols, const float* bias) {
    for (int64_t r = 0; r < rows; ++r) kernels::add_inplace(x + r * cols, bias, cols);
  };

  std::vector<ForwardResult> out(seqs.size());
  // Each matrix is taken just before its use and given back right after,
  // so a streamed model can reuse its read buffer at once.
  auto linear = [&](Rows& in, int64_t l, LayerMatrix m, Rows& y) {
    kernels::linear(f(in), n, w.acquire(l, m), f(y));
    w.release();
  };
  // Matrices over one input (a layer's q, k and v; its gate and up) in one
  // parallel region, the input quantized once, where the provider can hold
  // them together.
  auto linears = [&](Rows& in, int64_t l, std::initializer_list<std::pair<LayerMatrix, Rows*>> ms) {
    kernels::LinearTo outs[3];
    if (!w.holds_several() || ms.size() > std::size(outs)) {
      for (const auto& [m, y] : ms) linear(in, l, m, *y);
      return;
    }
    int count = 0;
    for (const auto& [m, y] : ms) outs[count++] = {w.acquire(l, m), f(*y)};
    kernels::linear_many(f(in), n, outs, count);
    for (int i = 0; i < count; ++i) w.release();
  };
  // Every kernel but attention treats rows independently and is
  // batch-invariant, so it runs once over the whole batch; attention reads
  // each sequence's own cache under its own mask.
  int64_t recurrent_index = 0;  // which delta-rule layer, for its part of a state
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    kernels::rms_norm(f(x), n, H, w.input_norm(l), eps, f(h));
    if (c.layer_is_recurrent(l)) {
      linear(h, l, LayerMatrix::kSsmQkv, ssm_qkv);
      linear(h, l, LayerMatrix::kSsmZ, ssm_z);
      linear(h, l, LayerMatrix::kSsmBeta, ssm_b);
      linear(h, l, LayerMatrix::kSsmAlpha, ssm_a);
      const DeltaRuleWeights dw{w.vector(l, LayerVector::kSsmConv), w.vector(l, LayerVector::kSsmDtBias),
                                w.vector(l, LayerVector::kSsmA), w.vector(l, LayerVector::kSsmNorm)};
      for (const Sequence& s : seqs)
        delta_rule_rows(c, dw, s.n, f(ssm_qkv) + s.offset * c.ssm_channels(), f(ssm_z) + s.offset * c.ssm_value_dim(),
                        f(ssm_b) + s.offset * c.ssm_value_heads, f(ssm_a) + s.offset * c.ssm_value_heads, s.before,
                        s.cache->size(), s.save, s.cache->states(), recurrent_index * c.ssm_state_floats(),
                        f(ssm_out) + s.offset * c.ssm_value_dim());
      ++recurrent_index;
      linear(ssm_out, l, LayerMatrix::kSsmOut, delta);
    } else {
      const int64_t D = c.layer_head_dim(l), Hkv = c.layer_kv_heads(l), rotary = c.layer_rotary_dims(l);
      const double scalar = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<double>(D);
      const float scale = static_cast<float>(1.0 / std::sqrt(scalar));
      const bool own_kv = c.layer_has_kv(l);
      // With an output gate, each head's query, then its gate.
      Rows& q_out = c.attn_output_gate ? q_gate : q;
      // A layer without a value matrix takes its key's projection.
      if (!own_kv)
        linears(h, l, {{LayerMatrix::kQ, &q_out}});
      else if (c.layer_value_is_key(l))
        linears(h, l, {{LayerMatrix::kQ, &q_out}, {LayerMatrix::kK, &k}});
      else
        linears(h, l, {{LayerMatrix::kQ, &q_out}, {LayerMatrix::kK, &k}, {LayerMatrix::kV, &v}});
      if (own_kv && c.layer_value_is_key(l)) std::memcpy(f(v), f(k), n * Hkv * D * sizeof(float));
      if (c.attn_output_gate)
        for (int64_t r = 0; r < n * Hq; ++r) {
          std::memcpy(f(q) + r * D, f(q_gate) + r * 2 * D, D * sizeof(float));
          std::memcpy(f(attn_gate) + r * D, f(q_gate) + r * 2 * D + D, D * sizeof(float));
        }
      // Each head's rows normed as rows of their own: `gain` null for none.
      auto head_norm = [&](Rows& t, int64_t heads, const float* gain) {
        kernels::rms_norm(f(t), n * heads, D, gain ? gain : ones.data(), eps, f(head_normed));
        std::memcpy(f(t), f(head_normed), n * heads * D * sizeof(float));
      };
      if (c.attention_bias) {
        add_bias(f(q), n, Hq * D, w.vector(l, LayerVector::kQBias));
        add_bias(f(k), n, Hkv * D, w.vector(l, LayerVector::kKBias));
        add_bias(f(v), n, Hkv * D, w.vector(l, LayerVector::kVBias));
      }
      if (c.qk_norm) {
        head_norm(q, Hq, w.vector(l, LayerVector::kQNorm));
        if (own_kv) head_norm(k, Hkv, w.vector(l, LayerVector::kKNorm));
      }
      if (c.value_norm && own_kv) head_norm(v, Hkv, nullptr);
      const bool sliding = c.layer_is_sliding(l);
      const float* lc = sliding ? f(local_cos) : f(cos);
      const float* ls = sliding ? f(local_sin) : f(sin);
      kernels::rope(f(q), n, Hq, D, rotary, lc, ls);
      if (own_kv) kernels::rope(f(k), n, Hkv, D, rotary, lc, ls);
      for (const Sequence& s : seqs) {
        if (own_kv) s.cache->write_rows(l, f(k) + s.offset * Hkv * D, f(v) + s.offset * Hkv * D, s.n);
        const kernels::AttentionShape shape{s.n, Hq, Hkv, D, s.cache->head_stride(l)};
        float* const qs = f(q) + s.offset * Hq * D;
        float* const os = f(attn) + s.offset * Hq * D;
        const auto& visible = sliding ? s.visible_local : s.visible;
        if (s.cache->type() == KVType::F16)
          kernels::attention(qs, static_cast<const uint16_t*>(s.cache->keys(l)),
                             static_cast<const uint16_t*>(s.cache->values(l)), shape, visible, scale, os);
        else
          kernels::attention(qs, static_cast<const float*>(s.cache->keys(l)),
                             static_cast<const float*>(s.cache->values(l)), shape, visible, scale, os);
      }
      if (c.attn_output_gate)
        for (int64_t e = 0; e < n * Hq * D; ++e) f(attn)[e] *= 1.0f / (1.0f + std::exp(-f(attn_gate)[e]));
      linear(attn, l, LayerMatrix::kO, delta);
    }
    // Gemma's norms on each branch's output, before its residual add.
    auto branch_norm = [&](LayerVector v) {
      if (!c.post_norms) return;
      kernels::rms_norm(f(delta), n, H, w.vector(l, v), eps, f(h));
      std::memcpy(f(delta), f(h), n * H * sizeof(float));
    };
    branch_norm(LayerVector::kPostAttnNorm);
    kernels::add_inplace(f(x), f(delta), n * H);
    kernels::rms_norm(f(x), n, H, w.post_norm(l), eps, f(h));
    linears(h, l, {{LayerMatrix::kGate, &gate}, {LayerMatrix::kUp, &up}});
    const int64_t I = c.layer_intermediate_size(l);
    if (c.activation == Activation::kGeluTanh)
      kernels::gelu_tanh_mul(f(gate), f(up), n * I, f(gate));
    else
      kernels::silu_mul(f(gate), f(up), n * I, f(gate));
    linear(gate, l, LayerMatrix::kDown, delta);
    branch_norm(LayerVector::kPostFfnNorm);
    kernels::add_inplace(f(x), f(delta), n * H);
    if (P > 0) {
      // The layer's per-layer input, gated by its output: gelu(x Wg) * input,
      // projected back, normed, added.
      linear(x, l, LayerMatrix::kPleGate, per_layer_gate);
      kernels::gelu_tanh_mul(f(per_layer_gate), per_layer.row(l * n), n * P, f(per_layer_gate));
      linear(per_layer_gate, l, LayerMatrix::kPleProj, delta);
      branch_norm(LayerVector::kPleNorm);
      kernels::add_inplace(f(x), f(delta), n * H);
    }
    if (c.layer_output_scale) {
      const float scalar = w.vector(l, LayerVector::kOutScale)[0];
      for (int64_t e = 0; e < n * H; ++e) f(x)[e] *= scalar;
    }
    for (size_t b = 0; b < seqs.size(); ++b) {
      const Sequence& s = seqs[b];
      const ForwardRequest& req = *s.req;
      if (req.hidden_layers.empty() && !req.on_layer) continue;
      const RowsView rows = x.view().slice(s.offset, s.n);
      for (int64_t hl : req.hidden_layers)
        if (hl == l) out[b].hidden[l] = Rows::copy_of(rows);
      if (req.on_layer && (req.tap_layers.empty() ||
                           std::find(req.tap_layers.begin(), req.tap_layers.end(), l) != req.tap_layers.end()))
        req.on_layer(l, rows);
    }
  }
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
  // Only prefills: no row wants logits (a streamed head still passes over
  // its units, to stay in step).
  Rows normed = rows.empty() ? Rows(0, c.hidden_size) : final_norm_rows(x.select(rows));
  Rows logits(normed.rows(), c.vocab_size);
  w.head(normed.data(), normed.rows(), logits.data());
  soft_cap(logits);
  int64_t first = 0;
  for (size_t b = 0; b < seqs.size(); ++b) {
    // A lone sequence keeps the whole matrices; a batch's are split by copy.
    if (seqs.size() == 1) {
      out[b].logits = std::move(logits);
      if (seqs[b].req->final_hidden) out[b].final_hidden = std::move(normed);
    } else {
      out[b].logits = logits.slice(first, counts[b]);
      if (seqs[b].req->final_hidden) out[b].final_hidden = normed.slice(first, counts[b]);
    }
    first += counts[b];
    if (!seqs[b].req->final_hidden_rows.empty()) {
      std::vector<int64_t> wanted;
      for (int64_t r : seqs[b].req->final_hidden_rows) wanted.push_back(seqs[b].offset + r);
      out[b].final_hidden_rows = final_norm_rows(x.select(wanted));
    }
  }
  // Only now, with nothing left to throw, do the new entries become part of
  // the caches: a forward that fails anywhere leaves every cache as it was.
  for (const Sequence& s : seqs) s.cache->commit(s.n);
  thread_choice_->record(pick, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return out;
}

Rows Model::final_norm_rows(RowsView hidden) const {
  const ModelConfig& c = config_;
  Rows normed(hidden.rows, c.hidden_size);
  kernels::rms_norm(hidden.data, hidden.rows, c.hidden_size, final_norm(), static_cast<float>(c.rms_norm_eps),
                    normed.data());
  return normed;
}

Rows Model::head_logits(RowsView hidden) const {
  if (stream_) throw Error("head_logits: " + name_ + " is streamed from disk; its head runs inside forward()");
  const Rows normed = final_norm_rows(hidden);
  Rows logits(normed.rows(), config_.vocab_size);
  kernels::linear(normed.data(), normed.rows(), weights_.lm_head, logits.data());
  soft_cap(logits);
  return logits;
}

void Model::soft_cap(Rows& logits) const {
  const double cap = config_.final_logit_softcap;
  if (cap <= 0) return;
  // As llama.cpp: scale by 1 / cap, tanh, scale by cap, each in float.
  const float inv = static_cast<float>(1.0 / cap), c = static_cast<float>(cap);
  float* x = logits.data();
  for (int64_t e = 0; e < logits.rows() * logits.cols(); ++e) x[e] = std::tanh(x[e] * inv) * c;
}

void Model::per_layer_inputs(const std::vector<int64_t>& ids, const Rows& x, Rows& out) const {
  // As llama.cpp's gemma4 (project_per_layer_inputs): the embedding's
  // projection / sqrt(hidden), each layer's share RMS-normed, plus the
  // token's row of the per-layer embedding x sqrt(size), all / sqrt(2).
  const ModelConfig& c = config_;
  const PerLayerInputs* pl = provider_->per_layer_inputs();
  if (!pl) throw Error("forward: " + name_ + " has no per-layer input weights here");
  const int64_t n = x.rows(), L = c.num_hidden_layers, P = c.per_layer_input_size;
  Rows proj(n, L * P), normed(n * L, P), embed(n, L * P);
  kernels::linear(x.data(), n, pl->proj, proj.data());
  const float proj_scale = 1.0f / std::sqrt(static_cast<float>(c.hidden_size));
  for (int64_t e = 0; e < n * L * P; ++e) proj.data()[e] *= proj_scale;
  kernels::rms_norm(proj.data(), n * L, P, pl->norm.data(), static_cast<float>(c.rms_norm_eps), normed.data());
  provider_->per_layer_embed(ids.data(), n, embed.data());
  const float embed_scale = std::sqrt(static_cast<float>(P)), mix = 1.0f / std::sqrt(2.0f);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < P; ++j)
        out.row(l * n + i)[j] = (normed.row(i * L + l)[j] + embed.row(i)[l * P + j] * embed_scale) * mix;
}

}  // namespace splitspec

#include "common/drafting/eagle3_head.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>

#include "common/kernels/kernels.h"
#include "common/kernels/linear.h"
#include "common/kernels/quant.h"
#include "common/model/family.h"
#include "common/model/gguf_model.h"
#include "common/model/model.h"
#include "common/util/error.h"
#include "common/weights/gguf.h"

namespace splitspec {

std::shared_ptr<const Eagle3Head> Eagle3Head::load(const std::string& path, const std::string& target) {
  namespace fs = std::filesystem;
  if (!fs::is_regular_file(path) || !is_gguf_file(path))
    throw Error(path + ": an EAGLE-3 head is read from its GGUF file (llama.cpp's draft-eagle3 layout)");
  GgufFile f(path);
  const std::string arch = f.get("general.architecture").str;
  if (arch != "eagle3") throw Error(path + ": architecture '" + arch + "', not an EAGLE-3 head (eagle3)");
  const std::string k = "eagle3.";
  auto head = std::shared_ptr<Eagle3Head>(new Eagle3Head);
  ModelConfig& c = head->config_;
  c.architecture = "llama";
  c.hidden_size = gguf_u32(f, k + "embedding_length");
  c.intermediate_size = gguf_u32(f, k + "feed_forward_length");
  c.num_hidden_layers = 1;
  c.num_attention_heads = gguf_u32(f, k + "attention.head_count");
  c.num_key_value_heads = gguf_u32(f, k + "attention.head_count_kv", static_cast<uint32_t>(c.num_attention_heads));
  c.head_dim = gguf_u32(f, k + "attention.key_length", static_cast<uint32_t>(c.hidden_size / c.num_attention_heads));
  c.rms_norm_eps = gguf_number(f, k + "attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_theta = gguf_number(f, k + "rope.freq_base", 10000.0);
  c.max_position_embeddings = gguf_u32(f, k + "context_length", 4096);
  c.vocab_size = 1;  // its own vocabulary is the target's, checked below
  c.bos_token_id = c.eos_token_id = -1;
  if (gguf_u32(f, k + "rope.dimension_count", static_cast<uint32_t>(c.head_dim)) != c.head_dim)
    throw Error(path + ": partial rotary embeddings are not read in an EAGLE-3 head");
  if (const GgufTensor* t = f.tensor("rope_freqs.weight")) c.rope_freq_factors = dequantize_all(gguf_tensor_ref(f, t->name, {c.head_dim / 2}));
  apply_context_limit(c);
  c.validate(path);
  const GgufValue& layers = f.get(k + "target_layers");
  for (double x : layers.nums) head->layers_.push_back(static_cast<int32_t>(x));
  if (head->layers_.size() != 3) throw Error(path + ": " + k + "target_layers must name three target layers");
  head->target_hidden_ = gguf_u32(f, k + "target_hidden_size");
  head->norm_before_residual_ = f.has(k + "norm_before_residual") && f.get(k + "norm_before_residual").num != 0;
  const bool norm_before_fc = f.has(k + "norm_before_fc") && f.get(k + "norm_before_fc").num != 0;

  const int64_t H = c.hidden_size, Ht = head->target_hidden_, D = c.head_dim;
  const int64_t Q = c.num_attention_heads * D, KV = c.num_key_value_heads * D, I = c.intermediate_size;
  auto matrix = [&](const GgufFile& file, const std::string& name, int64_t rows, int64_t cols, int64_t rope_heads = 0) {
    Matrix m;
    m.rows = rows;
    m.cols = cols;
    m.w = dequantize_all(gguf_tensor_ref(file, name, {rows, cols}));
    // llama.cpp's files hold Llama's query and key rows in adjacent pairs.
    if (rope_heads > 0) {
      const WeightBytes back = permute_rope_rows(reinterpret_cast<const uint8_t*>(m.w.data()), rows, D,
                                       cols * static_cast<int64_t>(sizeof(float)), false);
      std::memcpy(m.w.data(), back.data(), back.size());
    }
    return m;
  };
  auto vec = [&](const std::string& name, int64_t n) { return dequantize_all(gguf_tensor_ref(f, name, {n})); };
  head->fc_ = matrix(f, "fc.weight", H, 3 * Ht);
  if (norm_before_fc) head->fc_norm_ = vec("enc.output_norm.weight", 3 * Ht);
  head->attn_norm_ = vec("blk.0.attn_norm.weight", H);
  head->hidden_norm_ = vec("blk.0.attn_norm_2.weight", H);
  head->q_ = matrix(f, "blk.0.attn_q.weight", Q, 2 * H, c.num_attention_heads);
  head->k_ = matrix(f, "blk.0.attn_k.weight", KV, 2 * H, c.num_key_value_heads);
  head->v_ = matrix(f, "blk.0.attn_v.weight", KV, 2 * H);
  head->o_ = matrix(f, "blk.0.attn_output.weight", H, Q);
  head->ffn_norm_ = vec("blk.0.ffn_norm.weight", H);
  head->gate_ = matrix(f, "blk.0.ffn_gate.weight", I, H);
  head->up_ = matrix(f, "blk.0.ffn_up.weight", I, H);
  head->down_ = matrix(f, "blk.0.ffn_down.weight", H, I);
  head->out_norm_ = vec("output_norm.weight", H);

  // What the head lacks comes from the target's file.
  std::shared_ptr<GgufFile> t;
  auto target_file = [&]() -> const GgufFile& {
    if (!t) {
      if (target.empty() || !fs::is_regular_file(target) || !is_gguf_file(target))
        throw Error(path + ": the head reads the target's embedding or head; give the target's GGUF file");
      t = std::make_shared<GgufFile>(target);
    }
    return *t;
  };
  std::shared_ptr<GgufFile> own = f.tensor("token_embd.weight") ? std::make_shared<GgufFile>(path) : nullptr;
  const GgufFile& ef = own ? *own : target_file();
  const GgufTensor* embed = ef.tensor("token_embd.weight");
  if (!embed || embed->ne.size() != 2 || embed->ne[0] != H)
    throw Error(ef.path() + ": no token_embd.weight of width " + std::to_string(H) + " for the EAGLE-3 head");
  head->vocab_ = embed->ne[1];
  head->embed_ = gguf_tensor_ref(ef, "token_embd.weight", {head->vocab_, H});
  head->embed_file_ = own ? std::shared_ptr<const void>(own) : std::shared_ptr<const void>(t);
  if (const GgufTensor* d2t = f.tensor("d2t")) {
    if (d2t->type != static_cast<uint32_t>(GgmlType::kI64) || d2t->ne.size() != 1)
      throw Error(path + ": d2t must be I64 draft-to-target ids");
    head->d2t_.resize(static_cast<size_t>(d2t->ne[0]));
    std::memcpy(head->d2t_.data(), d2t->data, head->d2t_.size() * sizeof(int64_t));
    for (int64_t id : head->d2t_)
      if (id < 0 || id >= head->vocab_) throw Error(path + ": d2t names target id " + std::to_string(id) + " outside the vocabulary");
  } else {
    head->d2t_.resize(static_cast<size_t>(head->vocab_));
    std::iota(head->d2t_.begin(), head->d2t_.end(), int64_t{0});
  }
  const int64_t nd = head->draft_vocab();
  head->head_ = f.tensor("output.weight") ? matrix(f, "output.weight", nd, H) : matrix(target_file(), "output.weight", nd, H);
  rope_tables(c, head->cos_, head->sin_);
  return head;
}

size_t Eagle3Head::weight_bytes() const {
  size_t n = 0;
  for (const Matrix* m : {&fc_, &q_, &k_, &v_, &o_, &gate_, &up_, &down_, &head_}) n += m->w.size() * sizeof(float);
  for (const std::vector<float>* v : {&fc_norm_, &attn_norm_, &hidden_norm_, &ffn_norm_, &out_norm_})
    n += v->size() * sizeof(float);
  return n + d2t_.size() * sizeof(int64_t);
}

void Eagle3Head::linear(const float* x, int64_t n, const Matrix& m, float* y) const {
  kernels::linear(x, n, MatrixRef{WType::F32, m.w.data(), m.rows, m.cols}, y);
}

Rows Eagle3Head::fuse(RowsView features) const {
  const int64_t n = features.rows, F = 3 * target_hidden_;
  if (features.cols != F) throw Error("eagle3 head: features of " + std::to_string(features.cols) + " values; it fuses " + std::to_string(F));
  Rows in = Rows::copy_of(features);
  if (!fc_norm_.empty())
    kernels::rms_norm(features.data, n, F, fc_norm_.data(), static_cast<float>(config_.rms_norm_eps), in.data());
  Rows g(n, config_.hidden_size);
  linear(in.data(), n, fc_, g.data());
  return g;
}

Eagle3Head::Step Eagle3Head::forward(const std::vector<int32_t>& tokens, RowsView g, KVCache& cache) const {
  const int64_t n = static_cast<int64_t>(tokens.size()), past = cache.size();
  std::vector<int64_t> positions(static_cast<size_t>(n));
  std::iota(positions.begin(), positions.end(), past);
  std::vector<std::vector<int32_t>> visible(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    visible[static_cast<size_t>(i)].resize(static_cast<size_t>(past + i + 1));
    std::iota(visible[static_cast<size_t>(i)].begin(), visible[static_cast<size_t>(i)].end(), 0);
  }
  return run(tokens, g, positions, visible, false, cache);
}

Eagle3Head::Step Eagle3Head::forward_tree(const std::vector<int32_t>& tokens, RowsView g,
                                          const std::vector<int64_t>& positions, const AttentionMask& mask,
                                          KVCache& cache) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (static_cast<int64_t>(positions.size()) != n || mask.rows != n || mask.cols != cache.size() + n)
    throw Error("eagle3 head: a tree level needs a position and a mask row [" + std::to_string(cache.size() + n) +
                "] per token");
  std::vector<std::vector<int32_t>> visible(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < mask.cols; ++j)
      if (mask.row(i)[j]) visible[static_cast<size_t>(i)].push_back(static_cast<int32_t>(j));
    if (visible[static_cast<size_t>(i)].empty()) throw Error("eagle3 head: a mask row attends to nothing");
  }
  return run(tokens, g, positions, visible, true, cache);
}

Eagle3Head::Step Eagle3Head::run(const std::vector<int32_t>& tokens, RowsView g, const std::vector<int64_t>& positions,
                                 const std::vector<std::vector<int32_t>>& visible, bool every_row, KVCache& cache) const {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(tokens.size()), H = c.hidden_size, D = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, I = c.intermediate_size;
  if (n == 0 || g.rows != n || g.cols != H)
    throw Error("eagle3 head: " + std::to_string(n) + " tokens need as many feature rows of " + std::to_string(H));
  const int64_t past = cache.size();
  if (past + n > cache.capacity()) throw Error("eagle3 head: its context of " + std::to_string(cache.capacity()) + " is full");
  for (int64_t p : positions)
    if (p < 0 || p >= c.max_position_embeddings) throw Error("eagle3 head: position " + std::to_string(p) + " out of range");
  const float eps = static_cast<float>(c.rms_norm_eps);
  Rows e(n, H), both(n, 2 * H), gn(n, H);
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_) throw Error("eagle3 head: token id " + std::to_string(tokens[i]) + " outside the vocabulary");
    dequantize_rows(embed_, tokens[i], tokens[i] + 1, e.row(i));
  }
  Rows en(n, H);
  kernels::rms_norm(e.data(), n, H, attn_norm_.data(), eps, en.data());
  kernels::rms_norm(g.data, n, H, hidden_norm_.data(), eps, gn.data());
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(both.row(i), en.row(i), static_cast<size_t>(H) * sizeof(float));
    std::memcpy(both.row(i) + H, gn.row(i), static_cast<size_t>(H) * sizeof(float));
  }
  Rows q(n, Hq * D), k(n, Hkv * D), v(n, Hkv * D), attn(n, Hq * D), cs(n, D / 2), sn(n, D / 2);
  linear(both.data(), n, q_, q.data());
  linear(both.data(), n, k_, k.data());
  linear(both.data(), n, v_, v.data());
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(cs.row(i), cos_.data() + positions[i] * (D / 2), static_cast<size_t>(D / 2) * sizeof(float));
    std::memcpy(sn.row(i), sin_.data() + positions[i] * (D / 2), static_cast<size_t>(D / 2) * sizeof(float));
  }
  kernels::rope(q.data(), n, Hq, D, D, cs.data(), sn.data());
  kernels::rope(k.data(), n, Hkv, D, D, cs.data(), sn.data());
  cache.write_rows(0, k.data(), v.data(), n);
  const kernels::AttentionShape shape{n, Hq, Hkv, D, cache.head_stride(0)};
  kernels::attention(q.data(), static_cast<const float*>(cache.keys(0)), static_cast<const float*>(cache.values(0)), shape,
                     visible, 1.0f / std::sqrt(static_cast<float>(D)), attn.data());
  Rows h(n, H), normed(n, H), gate(n, I), up(n, I), mlp(n, H);
  linear(attn.data(), n, o_, h.data());
  kernels::add_inplace(h.data(), norm_before_residual_ ? gn.data() : g.data, n * H);
  kernels::rms_norm(h.data(), n, H, ffn_norm_.data(), eps, normed.data());
  linear(normed.data(), n, gate_, gate.data());
  linear(normed.data(), n, up_, up.data());
  kernels::silu_mul(gate.data(), up.data(), n * I, gate.data());
  linear(gate.data(), n, down_, mlp.data());
  kernels::add_inplace(h.data(), mlp.data(), n * H);
  cache.commit(n);
  Step out;
  out.hidden = every_row ? std::move(h) : h.slice(n - 1, 1);
  const int64_t m = out.hidden.rows();
  Rows last(m, H), draft(m, draft_vocab());
  kernels::rms_norm(out.hidden.data(), m, H, out_norm_.data(), eps, last.data());
  linear(last.data(), m, head_, draft.data());
  out.logits = Rows(m, vocab_);
  std::fill(out.logits.data(), out.logits.data() + m * vocab_, -std::numeric_limits<float>::infinity());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < draft_vocab(); ++i) out.logits.row(r)[d2t_[static_cast<size_t>(i)]] = draft.row(r)[i];
  return out;
}

}  // namespace splitspec

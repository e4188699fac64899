#include "common/drafting/assistant_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "common/kernels/kernels.h"
#include "common/kernels/linear.h"
#include "common/kernels/quant.h"
#include "common/model/family.h"
#include "common/model/gguf_model.h"
#include "common/model/model.h"
#include "common/util/error.h"
#include "common/weights/gguf.h"

namespace splitspec {

namespace {

// A mapped matrix the kernels can read: packed into a copy where its type
// is stored packed.
MatrixRef readable(MatrixRef m, WeightBytes& owned) {
  if (!stored_packed(m.type)) return m;
  const auto* bytes = static_cast<const uint8_t*>(m.data);
  owned.assign(bytes, bytes + m.bytes());
  std::vector<uint8_t> scratch;
  pack_rows(m.type, owned.data(), m.rows, m.cols, scratch);
  m.data = owned.data();
  m.packed = true;
  return m;
}

}  // namespace

std::shared_ptr<const AssistantHead> AssistantHead::load(const std::string& path, const std::string& target) {
  namespace fs = std::filesystem;
  if (!fs::is_regular_file(path) || !is_gguf_file(path))
    throw Error(path + ": a Gemma 4 assistant is read from its GGUF file (llama.cpp's gemma4-assistant)");
  auto f = std::make_shared<GgufFile>(path);
  const std::string arch = f->get("general.architecture").str;
  if (arch != "gemma4-assistant") throw Error(path + ": architecture '" + arch + "', not a Gemma 4 assistant (gemma4-assistant)");
  if (target.empty() || !fs::is_regular_file(target) || !is_gguf_file(target))
    throw Error(path + ": the assistant reads its target's embedding and keys; give the Gemma 4 target's GGUF file");
  auto tf = std::make_shared<GgufFile>(target);
  const ModelConfig tc = gguf_model_config(*tf);
  if (tc.architecture != "gemma4") throw Error(target + ": a " + tc.architecture + " model, not the Gemma 4 target the assistant reads");

  const std::string k = "gemma4-assistant.";
  auto head = std::shared_ptr<AssistantHead>(new AssistantHead);
  AssistantHead& a = *head;
  a.hidden_ = gguf_u32(*f, k + "embedding_length");
  a.target_hidden_ = gguf_u32(*f, k + "embedding_length_out");
  a.heads_ = gguf_u32(*f, k + "attention.head_count");
  a.eps_ = gguf_number(*f, k + "attention.layer_norm_rms_epsilon", 1e-6);
  const int64_t n_layers = gguf_u32(*f, k + "block_count");
  const int64_t I = gguf_u32(*f, k + "feed_forward_length");
  const int64_t H = a.hidden_, Ht = a.target_hidden_;
  if (Ht != tc.hidden_size)
    throw Error(path + ": drafts for a target of hidden size " + std::to_string(Ht) + "; " + target + "'s is " +
                std::to_string(tc.hidden_size));
  const int64_t L = tc.num_hidden_layers;
  if (L < 2 || !tc.layer_is_sliding(L - 2) || tc.layer_is_sliding(L - 1))
    throw Error(target + ": the assistant reads the keys of the target's last two layers, which must be local then global");
  a.kv_layers_ = {static_cast<int32_t>(tc.kv_source_layer(L - 2)), static_cast<int32_t>(tc.kv_source_layer(L - 1))};

  // The store holds the target's rows of those two layers; its RoPE tables
  // are the assistant's own (its bases, rotary sizes and divisors).
  ModelConfig& s = a.store_config_;
  s.architecture = "gemma4";
  s.hidden_size = H;
  s.intermediate_size = I;
  s.num_hidden_layers = 2;
  s.num_attention_heads = a.heads_;
  const std::vector<int64_t> kv = gguf_counts(*f, k + "attention.head_count_kv", n_layers);
  s.head_dim = gguf_u32(*f, k + "attention.key_length");
  s.local_head_dim = gguf_u32(*f, k + "attention.key_length_swa", static_cast<uint32_t>(s.head_dim));
  s.rotary_dim = gguf_u32(*f, k + "rope.dimension_count", static_cast<uint32_t>(s.head_dim));
  if (s.rotary_dim == s.head_dim) s.rotary_dim = 0;
  s.local_rotary_dim = gguf_u32(*f, k + "rope.dimension_count_swa", static_cast<uint32_t>(s.local_head_dim));
  s.rope_theta = gguf_number(*f, k + "rope.freq_base", 10000.0);
  s.rope_local_theta = gguf_number(*f, k + "rope.freq_base_swa", 10000.0);
  s.sliding_window = gguf_u32(*f, k + "attention.sliding_window");
  s.sliding_window_pattern = 2;
  s.vocab_size = 1;
  s.bos_token_id = s.eos_token_id = -1;
  s.max_position_embeddings = tc.max_position_embeddings;
  apply_context_limit(s);
  if (const GgufTensor* t = f->tensor("rope_freqs.weight"))
    s.rope_freq_factors = dequantize_all(gguf_tensor_ref(*f, t->name, {s.rotary_dims() / 2}));
  // Each of its layers is local or global as the file lists them.
  const std::string pattern_key = k + "attention.sliding_window_pattern";
  const GgufValue& pattern = f->get(pattern_key);
  if (pattern.type != GgufType::kArray || static_cast<int64_t>(pattern.nums.size()) != n_layers)
    throw Error(path + ": " + pattern_key + " must list " + std::to_string(n_layers) + " layers");
  int64_t local_kv = -1, global_kv = -1;
  for (int64_t l = 0; l < n_layers; ++l) (pattern.nums[static_cast<size_t>(l)] != 0 ? local_kv : global_kv) = kv[static_cast<size_t>(l)];
  s.num_key_value_heads = global_kv > 0 ? global_kv : tc.num_key_value_heads;
  s.local_kv_heads = local_kv > 0 ? local_kv : tc.layer_kv_heads(a.kv_layers_[0]);
  s.validate(path);
  // Its heads must be the target's, kind for kind.
  for (int j = 0; j < 2; ++j) {
    const int64_t tl = a.kv_layers_[static_cast<size_t>(j)];
    if (tc.layer_head_dim(tl) != s.layer_head_dim(j) || tc.layer_kv_heads(tl) != s.layer_kv_heads(j))
      throw Error(path + ": its " + (j == 0 ? "local" : "global") + " layers read " + std::to_string(s.layer_kv_heads(j)) +
                  " key-value heads of " + std::to_string(s.layer_head_dim(j)) + "; the target's layer " +
                  std::to_string(tl) + " holds " + std::to_string(tc.layer_kv_heads(tl)) + " of " +
                  std::to_string(tc.layer_head_dim(tl)));
  }

  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    Matrix m;
    m.rows = rows;
    m.cols = cols;
    m.w = dequantize_all(gguf_tensor_ref(*f, name, {rows, cols}));
    return m;
  };
  auto vec = [&](const std::string& name, int64_t n) { return dequantize_all(gguf_tensor_ref(*f, name, {n})); };
  a.pre_ = matrix("nextn.pre_projection.weight", H, 2 * Ht);
  a.post_ = matrix("nextn.post_projection.weight", Ht, H);
  for (int64_t l = 0; l < n_layers; ++l) {
    Layer y;
    y.local = pattern.nums[static_cast<size_t>(l)] != 0;
    const int64_t D = y.local ? s.layer_head_dim(0) : s.layer_head_dim(1);
    const std::string b = "blk." + std::to_string(l) + ".";
    y.attn_norm = vec(b + "attn_norm.weight", H);
    y.q = matrix(b + "attn_q.weight", a.heads_ * D, H);
    y.q_norm = vec(b + "attn_q_norm.weight", D);
    y.o = matrix(b + "attn_output.weight", H, a.heads_ * D);
    y.post_attn_norm = vec(b + "post_attention_norm.weight", H);
    y.out_scale = vec(b + "layer_output_scale.weight", 1)[0];
    y.ffn_norm = vec(b + "ffn_norm.weight", H);
    y.gate = matrix(b + "ffn_gate.weight", I, H);
    y.up = matrix(b + "ffn_up.weight", I, H);
    y.down = matrix(b + "ffn_down.weight", H, I);
    y.post_ffw_norm = vec(b + "post_ffw_norm.weight", H);
    a.layers_.push_back(std::move(y));
  }
  a.out_norm_ = vec("output_norm.weight", H);
  const GgufTensor* own = f->tensor("token_embd.weight");
  if (!own || own->ne.size() != 2 || own->ne[0] != H) throw Error(path + ": no token_embd.weight of width " + std::to_string(H));
  a.vocab_ = own->ne[1];
  if (a.vocab_ != tc.vocab_size)
    throw Error(path + ": a vocabulary of " + std::to_string(a.vocab_) + "; the target's is " + std::to_string(tc.vocab_size));
  a.head_ = readable(gguf_tensor_ref(*f, "token_embd.weight", {a.vocab_, H}), a.head_packed_);
  a.head_file_ = f;
  a.target_embed_ = gguf_tensor_ref(*tf, "token_embd.weight", {a.vocab_, Ht});
  a.target_file_ = tf;
  rope_tables(s, a.cos_, a.sin_);
  rope_tables(s, a.local_cos_, a.local_sin_, true);
  return head;
}

size_t AssistantHead::weight_bytes() const {
  size_t n = (pre_.w.size() + post_.w.size() + out_norm_.size()) * sizeof(float) + static_cast<size_t>(head_.bytes());
  for (const Layer& y : layers_) {
    for (const Matrix* m : {&y.q, &y.o, &y.gate, &y.up, &y.down}) n += m->w.size() * sizeof(float);
    for (const std::vector<float>* v : {&y.attn_norm, &y.q_norm, &y.post_attn_norm, &y.ffn_norm, &y.post_ffw_norm})
      n += v->size() * sizeof(float);
  }
  return n;
}

size_t AssistantHead::target_embedding_bytes() const { return static_cast<size_t>(target_embed_.bytes()); }

KVCache AssistantHead::new_store() const {
  // Grown as the target's rows come (KVCache::reserve).
  return KVCache(store_config_, std::min<int64_t>(256, store_config_.max_position_embeddings));
}

void AssistantHead::linear(const float* x, int64_t n, const Matrix& m, float* y) const {
  kernels::linear(x, n, MatrixRef{WType::F32, m.w.data(), m.rows, m.cols}, y);
}

HeadStep AssistantHead::forward(const std::vector<int32_t>& tokens, RowsView hidden, int64_t pos,
                                const KVCache& store) const {
  const int64_t n = static_cast<int64_t>(tokens.size()), H = hidden_, Ht = target_hidden_, Hq = heads_;
  if (n == 0 || hidden.rows != n || hidden.cols != Ht)
    throw Error("assistant: " + std::to_string(n) + " tokens need as many hidden rows of " + std::to_string(Ht));
  if (pos < 1 || store.size() < pos)
    throw Error("assistant: position " + std::to_string(pos) + " needs the target's keys before it; " +
                std::to_string(store.size()) + " are held");
  const float eps = static_cast<float>(eps_);
  // [embedding x sqrt(target hidden), h], projected in.
  Rows xh(n, 2 * Ht), x(n, H);
  const float embed_scale = std::sqrt(static_cast<float>(Ht));
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_) throw Error("assistant: token id " + std::to_string(tokens[i]) + " outside the vocabulary");
    float* row = xh.row(i);
    dequantize_rows(target_embed_, tokens[i], tokens[i] + 1, row);
    for (int64_t j = 0; j < Ht; ++j) row[j] *= embed_scale;
    std::memcpy(row + Ht, hidden.row(i), static_cast<size_t>(Ht) * sizeof(float));
  }
  linear(xh.data(), n, pre_, x.data());
  const int64_t Dmax = store_config_.max_head_dim(), I = store_config_.intermediate_size;
  Rows normed(n, H), q(n, Hq * Dmax), qn(n, Hq * Dmax), attn(n, Hq * Dmax), delta(n, H), gate(n, I), up(n, I);
  for (const Layer& y : layers_) {
    const int64_t slot = y.local ? 0 : 1, D = store_config_.layer_head_dim(slot);
    const int64_t rotary = store_config_.layer_rotary_dims(slot), half = rotary / 2;
    kernels::rms_norm(x.data(), n, H, y.attn_norm.data(), eps, normed.data());
    linear(normed.data(), n, y.q, q.data());
    kernels::rms_norm(q.data(), n * Hq, D, y.q_norm.data(), eps, qn.data());
    // Every row at `pos`.
    Rows cs(n, half), sn(n, half);
    const std::vector<float>& ct = y.local ? local_cos_ : cos_;
    const std::vector<float>& st = y.local ? local_sin_ : sin_;
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(cs.row(i), ct.data() + pos * half, static_cast<size_t>(half) * sizeof(float));
      std::memcpy(sn.row(i), st.data() + pos * half, static_cast<size_t>(half) * sizeof(float));
    }
    kernels::rope(qn.data(), n, Hq, D, rotary, cs.data(), sn.data());
    std::vector<int32_t> visible;
    for (int64_t p = 0; p < pos; ++p)
      if (!y.local || pos - p < store_config_.sliding_window) visible.push_back(static_cast<int32_t>(p));
    const std::vector<std::vector<int32_t>> all(static_cast<size_t>(n), visible);
    const kernels::AttentionShape shape{n, Hq, store_config_.layer_kv_heads(slot), D, store.head_stride(slot)};
    if (store.type() == KVType::F16)
      kernels::attention(qn.data(), static_cast<const uint16_t*>(store.keys(slot)),
                         static_cast<const uint16_t*>(store.values(slot)), shape, all, 1.0f, attn.data());
    else
      kernels::attention(qn.data(), static_cast<const float*>(store.keys(slot)),
                         static_cast<const float*>(store.values(slot)), shape, all, 1.0f, attn.data());
    linear(attn.data(), n, y.o, delta.data());
    kernels::rms_norm(delta.data(), n, H, y.post_attn_norm.data(), eps, normed.data());
    kernels::add_inplace(x.data(), normed.data(), n * H);
    kernels::rms_norm(x.data(), n, H, y.ffn_norm.data(), eps, normed.data());
    linear(normed.data(), n, y.gate, gate.data());
    linear(normed.data(), n, y.up, up.data());
    kernels::gelu_tanh_mul(gate.data(), up.data(), n * I, gate.data());
    linear(gate.data(), n, y.down, delta.data());
    kernels::rms_norm(delta.data(), n, H, y.post_ffw_norm.data(), eps, normed.data());
    kernels::add_inplace(x.data(), normed.data(), n * H);
    for (int64_t e = 0; e < n * H; ++e) x.data()[e] *= y.out_scale;
  }
  HeadStep out;
  kernels::rms_norm(x.data(), n, H, out_norm_.data(), eps, normed.data());
  out.logits = Rows(n, vocab_);
  kernels::linear(normed.data(), n, head_, out.logits.data());
  out.hidden = Rows(n, Ht);
  linear(normed.data(), n, post_, out.hidden.data());
  return out;
}

}  // namespace splitspec

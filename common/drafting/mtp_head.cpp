#include "common/drafting/mtp_head.h"

#include <cstring>
#include <filesystem>
#include <map>

#include "common/kernels/kernels.h"
#include "common/kernels/linear.h"
#include "common/kernels/quant.h"
#include "common/model/gguf_model.h"
#include "common/util/error.h"
#include "common/weights/gguf.h"

namespace splitspec {

std::shared_ptr<const MtpHead> MtpHead::load(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::is_regular_file(path) || !is_gguf_file(path))
    throw Error(path + ": a model's MTP head is read from its GGUF file (give the target's .gguf)");
  auto f = std::make_shared<GgufFile>(path);
  ModelConfig c = gguf_model_config(*f);
  apply_context_limit(c);
  const std::string key = c.architecture + ".nextn_predict_layers";
  if (!f->has(key) || gguf_u32(*f, key) == 0)
    throw Error(path + ": the model carries no MTP block (" + key + " is absent or 0)");
  // The block is stored as the layer after the decoder's last.
  const std::string layer = std::to_string(c.num_hidden_layers);
  const std::string blk = "blk." + layer + ".";
  auto has = [&](const std::string& t) { return f->tensor(blk + t) != nullptr; };
  ModelConfig b = c;
  b.num_hidden_layers = 1;
  if (!b.recurrent_layers.empty()) b.recurrent_layers = {0};
  b.tie_word_embeddings = c.tie_word_embeddings && !has("nextn.shared_head_head.weight");
  b.validate(path);

  std::map<std::string, WeightBytes> keep;
  const WeightSource file = gguf_weight_source(*f, c, keep);
  const std::string ours0 = "model.layers.0.";
  const WeightSource source = [&](const std::string& name, const std::vector<int64_t>& shape) {
    auto own = [&](const char* nextn) { return gguf_tensor_ref(*f, blk + nextn, shape); };
    if (name == kEmbedName && has("nextn.embed_tokens.weight")) return own("nextn.embed_tokens.weight");
    if (name == kHeadName && has("nextn.shared_head_head.weight")) return own("nextn.shared_head_head.weight");
    if (name == kFinalNormName && has("nextn.shared_head_norm.weight")) return own("nextn.shared_head_norm.weight");
    if (name.compare(0, ours0.size(), ours0) == 0)
      return file("model.layers." + layer + "." + name.substr(ours0.size()), shape);
    return file(name, shape);
  };
  auto head = std::shared_ptr<MtpHead>(new MtpHead);
  head->target_ = c;
  WeightSet w = build_weight_set(b, source, std::nullopt, true, path);
  for (auto& [name, bytes] : keep) w.owned.push_back(std::move(bytes));
  w.mapping = f;
  const int64_t H = c.hidden_size;
  // The projection as floats: it is read once a drafted token, and any
  // stored type the kernels take packed is then no concern.
  head->eh_floats_ = dequantize_all(gguf_tensor_ref(*f, blk + "nextn.eh_proj.weight", {H, 2 * H}));
  head->eh_proj_ = MatrixRef{WType::F32, head->eh_floats_.data(), H, 2 * H};
  head->enorm_ = dequantize_all(gguf_tensor_ref(*f, blk + "nextn.enorm.weight", {H}));
  head->hnorm_ = dequantize_all(gguf_tensor_ref(*f, blk + "nextn.hnorm.weight", {H}));
  head->block_ = Model::from_weight_set(b, std::move(w), fs::path(path).stem().string() + "-mtp");
  return head;
}

size_t MtpHead::weight_bytes() const {
  const WeightSet& w = block_->weight_set();
  size_t n = w.bytes() - w.embed.bytes() + (eh_floats_.size() + enorm_.size() + hnorm_.size()) * sizeof(float);
  if (w.lm_head.data == w.embed.data) n += w.lm_head.bytes();  // a tied head is the embedding read whole
  return n;
}

size_t MtpHead::head_bytes() const { return block_->weight_set().lm_head.bytes(); }

Rows MtpHead::inputs(const std::vector<int32_t>& tokens, RowsView hidden) const {
  const int64_t n = static_cast<int64_t>(tokens.size()), H = target_.hidden_size;
  if (n == 0 || hidden.rows != n || hidden.cols != H)
    throw Error("mtp head: " + std::to_string(n) + " tokens need as many hidden rows of " + std::to_string(H));
  const float eps = static_cast<float>(target_.rms_norm_eps);
  const WeightSet& w = block_->weight_set();
  Rows e(n, H), both(n, 2 * H);
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= target_.vocab_size)
      throw Error("mtp head: token id " + std::to_string(tokens[i]) + " outside the vocabulary");
    dequantize_rows(w.embed, tokens[i], tokens[i] + 1, e.row(i));
  }
  // Each row: its token's normed embedding, then the normed hidden state.
  Rows en(n, H), hn(n, H);
  kernels::rms_norm(e.data(), n, H, enorm_.data(), eps, en.data());
  kernels::rms_norm(hidden.data, n, H, hnorm_.data(), eps, hn.data());
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(both.row(i), en.row(i), static_cast<size_t>(H) * sizeof(float));
    std::memcpy(both.row(i) + H, hn.row(i), static_cast<size_t>(H) * sizeof(float));
  }
  Rows x(n, H);
  kernels::linear(both.data(), n, eh_proj_, x.data());
  return x;
}

MtpHead::Step MtpHead::forward(const std::vector<int32_t>& tokens, RowsView hidden, KVCache& cache, bool logits) const {
  ForwardRequest r;
  r.tokens = tokens;
  r.inputs = inputs(tokens, hidden);
  const int64_t last = static_cast<int64_t>(tokens.size()) - 1;
  if (!logits) {
    r.logits_rows = std::vector<int64_t>{};
    r.final_hidden_rows = {last};
    return {Rows(), std::move(block_->forward(r, cache).final_hidden_rows)};
  }
  r.logits_rows = std::vector<int64_t>{last};
  r.final_hidden = true;
  ForwardResult out = block_->forward(r, cache);
  return {std::move(out.logits), std::move(out.final_hidden)};
}

MtpHead::Step MtpHead::forward_tree(const std::vector<int32_t>& tokens, RowsView hidden, std::vector<int64_t> positions,
                                    AttentionMask mask, KVCache& cache, bool logits) const {
  ForwardRequest r;
  r.tokens = tokens;
  r.inputs = inputs(tokens, hidden);
  r.positions = std::move(positions);
  r.mask = std::move(mask);
  if (!logits) {
    r.logits_rows = std::vector<int64_t>{};
    for (int64_t i = 0; i < static_cast<int64_t>(tokens.size()); ++i) r.final_hidden_rows.push_back(i);
    return {Rows(), std::move(block_->forward(r, cache).final_hidden_rows)};
  }
  r.final_hidden = true;
  ForwardResult out = block_->forward(r, cache);
  return {std::move(out.logits), std::move(out.final_hidden)};
}

}  // namespace splitspec

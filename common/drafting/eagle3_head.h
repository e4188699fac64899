#pragma once
// An EAGLE-3 head, as llama.cpp's src/models/eagle3.cpp computes it from its
// draft-eagle3 files (architecture eagle3): an encoder fuses the inputs of
// three of the target's layers at a position into g (fc, optionally after an
// RMSNorm), and one decoder layer reads token x_{k+1} with g_k at position k:
//   a = attention over [attn_norm(embed(x)), attn_norm_2(g)] (queries, keys
//       and values from both halves; RoPE as Llama's; its own KV cache)
//   h = a + (norm_before_residual ? attn_norm_2(g) : g)
//   out = h + mlp(ffn_norm(h))                    (what the next step reads as g)
//   logits = output(output_norm(out))             over its draft vocabulary,
// each draft id i standing for target id d2t[i]. The embedding and the head
// are its own where its file has them, else the target's.
//
// Weights are held as float: a head is one layer and a reduced vocabulary.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/drafting/head_chain.h"
#include "common/kernels/weight_type.h"
#include "common/model/attention_mask.h"
#include "common/model/kv_cache.h"
#include "common/model/model_config.h"
#include "common/model/rows.h"

namespace splitspec {

class Eagle3Head {
 public:
  // The head in `path`; the embedding (and head) it lacks from the target's
  // GGUF file `target`. Throws splitspec::Error naming what is missing or
  // of another shape.
  static std::shared_ptr<const Eagle3Head> load(const std::string& path, const std::string& target);

  // The target layers whose inputs it reads (a layer count: the final
  // hidden state after the final norm), and their width.
  const std::vector<int32_t>& target_layers() const { return layers_; }
  int64_t target_hidden() const { return target_hidden_; }
  int64_t target_vocab() const { return vocab_; }
  int64_t draft_vocab() const { return static_cast<int64_t>(d2t_.size()); }
  size_t weight_bytes() const;
  KVCache new_cache() const { return KVCache(config_, config_.max_position_embeddings); }

  // Features [n, 3 x target hidden] into g [n, hidden].
  Rows fuse(RowsView features) const;
  // Positions cache.size(), ...: tokens[i] with g[i]. Returns the last
  // row's logits over the target's vocabulary [1, vocab] (-inf outside the
  // draft vocabulary) and its output, which the next step reads as g.
  using Step = HeadStep;
  Step forward(const std::vector<int32_t>& tokens, RowsView g, KVCache& cache) const;
  // Nodes of a token tree after the cache's entries, at `positions` under
  // `mask` (ForwardRequest's): every row's logits [n, vocab] and output.
  Step forward_tree(const std::vector<int32_t>& tokens, RowsView g, const std::vector<int64_t>& positions,
                    const AttentionMask& mask, KVCache& cache) const;

 private:
  struct Matrix {
    std::vector<float> w;  // [rows, cols]
    int64_t rows = 0, cols = 0;
  };
  void linear(const float* x, int64_t n, const Matrix& m, float* y) const;
  // The decoder over `tokens` at `positions`, row i attending to cache slots
  // visible[i]; the logits and outputs of every row, or of the last only.
  Step run(const std::vector<int32_t>& tokens, RowsView g, const std::vector<int64_t>& positions,
           const std::vector<std::vector<int32_t>>& visible, bool every_row, KVCache& cache) const;

  ModelConfig config_;  // the decoder layer's shape (one layer), for its cache and RoPE
  std::vector<int32_t> layers_;
  int64_t target_hidden_ = 0, vocab_ = 0;
  bool norm_before_residual_ = false;
  Matrix fc_, q_, k_, v_, o_, gate_, up_, down_, head_;
  // The embedding where it lies (its own file's, or the target's), rows
  // widened as tokens come: a target's vocabulary times its width is not
  // worth holding as float.
  MatrixRef embed_;
  std::shared_ptr<const void> embed_file_;
  std::vector<float> fc_norm_, attn_norm_, hidden_norm_, ffn_norm_, out_norm_;
  std::vector<int64_t> d2t_;
  std::vector<float> cos_, sin_;
};

}  // namespace splitspec

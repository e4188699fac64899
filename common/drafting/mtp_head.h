#pragma once
// A model's own multi-token-prediction block (Qwen3.5's MTP, GGUF's nextn
// layers past the decoder's), as llama.cpp's LLM_GRAPH_TYPE_DECODER_MTP
// computes it. At position t it reads the token x_t and the target's hidden
// state h_{t-1} after the final norm (zeros at position 0):
//   x = eh_proj [enorm(embed(x_t)), hnorm(h_{t-1})]
// then one full-attention decoder block of the target's kind over its own KV
// cache, the head's norm (nextn.shared_head_norm, or the target's) giving
// h'_t, and the head (nextn.shared_head_head, or the target's): logits for
// x_{t+1}. Drafting chains it: the next step reads the drafted token and h'_t.
//
// Loaded from the target's GGUF file: only the block, the embedding rows it
// looks up and the head are read (the file is mapped; the decoder's layers
// are never touched), so a robot holding the file pays for those alone.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/drafting/head_chain.h"
#include "common/model/model.h"

namespace splitspec {

class MtpHead {
 public:
  // The first MTP block of the GGUF file at `path`. Throws splitspec::Error
  // for a file without one (nextn_predict_layers 0) or missing its tensors.
  static std::shared_ptr<const MtpHead> load(const std::string& path);

  // The target's shape (hidden size, vocabulary).
  const ModelConfig& target_config() const { return target_; }
  // Bytes of what the head reads: the block, its projections and norms, and
  // the head matrix (the embedding's rows are read one at a time).
  size_t weight_bytes() const;
  KVCache new_cache() const { return block_->new_cache(); }

  // Positions cache.size(), ...: tokens[i] with hidden[i], the target's (or
  // the block's own, when chaining) hidden state of the position before.
  // Returns the last row's logits [1, vocab] and its h' [1, hidden], which
  // the next step reads.
  // Without `logits`, h' alone: a shortlist (shortlist.h) scores it.
  using Step = HeadStep;
  Step forward(const std::vector<int32_t>& tokens, RowsView hidden, KVCache& cache, bool logits = true) const;
  // Nodes of a token tree after the cache's entries, at `positions` under
  // `mask` (ForwardRequest's): every row's logits [n, vocab] and h' [n, hidden].
  Step forward_tree(const std::vector<int32_t>& tokens, RowsView hidden, std::vector<int64_t> positions,
                    AttentionMask mask, KVCache& cache, bool logits = true) const;
  // Rows of the head matrix by token id, as fp32 (for a shortlist).
  Rows head_rows(const std::vector<int64_t>& ids) const { return block_->head_rows(ids); }
  // Bytes of the head matrix alone.
  size_t head_bytes() const;

 private:
  // The block's input rows for tokens and hidden states.
  Rows inputs(const std::vector<int32_t>& tokens, RowsView hidden) const;
  ModelConfig target_;
  std::shared_ptr<Model> block_;  // one layer; its head is the MTP head
  std::vector<float> eh_floats_;
  MatrixRef eh_proj_;  // [hidden, 2 x hidden], over eh_floats_
  std::vector<float> enorm_, hnorm_;
  std::shared_ptr<const void> mapping_;
};

}  // namespace splitspec

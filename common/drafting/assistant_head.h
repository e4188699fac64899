#pragma once
// Gemma 4's assistant, as llama.cpp's src/models/gemma4-assistant.cpp
// computes it from its files (architecture gemma4-assistant): a small
// decoder that attends over the target's own keys and values instead of
// keeping any. At the position p of the last committed token x, with h the
// target's hidden state after its final norm at p - 1:
//   in = pre_projection([target_embed(x) x sqrt(target hidden), h])
//   each layer: query-only attention (per-head query norm, Gemma 4's RoPE,
//     scale 1) over the target's keys and values before p (its local layers
//     over the target's last local layer's, within the window; its global
//     ones over the last global layer's), then Gemma's normed branches and
//     GeGLU, the output scaled;
//   logits = its tied head(output_norm(out)), h' = post_projection(out).
// Each draft is the next step's x, with h' as h, at the same position p (as
// llama.cpp's draft path over shared memory runs it).
//
// Its small matrices are held as float; its embedding (the head) and the
// target's embedding stay in their files, mapped.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/drafting/head_chain.h"
#include "common/kernels/weight_type.h"
#include "common/model/kv_cache.h"
#include "common/model/model_config.h"
#include "common/model/rows.h"

namespace splitspec {

class AssistantHead {
 public:
  // The assistant in `path` for the Gemma 4 target in GGUF file `target`
  // (whose embedding it reads). Throws splitspec::Error naming what is
  // missing or does not fit the target.
  static std::shared_ptr<const AssistantHead> load(const std::string& path, const std::string& target);

  int64_t target_hidden() const { return target_hidden_; }
  int64_t vocab() const { return vocab_; }
  // The target layers whose keys and values it attends over: its last
  // local layer's (with its own keys) and its last global one's.
  const std::vector<int32_t>& target_kv_layers() const { return kv_layers_; }
  // Bytes of its own weights (its head included), and of the rows of the
  // target's embedding it reads (all of them, mapped).
  size_t weight_bytes() const;
  size_t target_embedding_bytes() const;
  // A store of the target's keys and values for its two layers (slot 0 the
  // local one's, slot 1 the global one's), as KVCache::write_rows takes
  // them; small, to be reserved as they come.
  KVCache new_store() const;

  // One step for each row: tokens[i] with hidden[i] at position `pos`, over
  // the store's entries before it. Returns logits [n, vocab] and h' [n,
  // target hidden].
  HeadStep forward(const std::vector<int32_t>& tokens, RowsView hidden, int64_t pos, const KVCache& store) const;

 private:
  struct Matrix {
    std::vector<float> w;  // [rows, cols]
    int64_t rows = 0, cols = 0;
  };
  struct Layer {
    bool local = false;
    Matrix q, o, gate, up, down;
    std::vector<float> attn_norm, q_norm, post_attn_norm, ffn_norm, post_ffw_norm;
    float out_scale = 1.0f;
  };
  void linear(const float* x, int64_t n, const Matrix& m, float* y) const;

  ModelConfig store_config_;  // two layers, local then global: the store's shape and the RoPE tables
  int64_t hidden_ = 0, heads_ = 0, target_hidden_ = 0, vocab_ = 0;
  double eps_ = 1e-6;
  std::vector<int32_t> kv_layers_;
  Matrix pre_, post_;
  std::vector<Layer> layers_;
  std::vector<float> out_norm_;
  MatrixRef head_, target_embed_;
  WeightBytes head_packed_;  // the head where its type is read packed
  std::shared_ptr<const void> head_file_, target_file_;
  std::vector<float> cos_, sin_, local_cos_, local_sin_;
};

}  // namespace splitspec

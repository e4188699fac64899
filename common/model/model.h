#pragma once
// LLaMA-family decoder (RMSNorm, rotate-half RoPE, grouped-query attention,
// SwiGLU or GeGLU, tied or separate LM head, and the families' options in
// model_config.h): weights in any WType (weight_type.h),
// activations in fp32. Free of LibTorch (the trainer's float weights, which
// are LibTorch tensors, are in common/train/model_weights.h).
//
// One forward call takes any set of new tokens with explicit positions and an
// explicit attention mask over cached plus new tokens, so the same call runs a
// prompt prefill, one decode step, a causal draft chain or a token tree.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/kernels/thread_choice.h"
#include "common/model/attention_mask.h"
#include "common/model/kv_cache.h"
#include "common/model/model_config.h"
#include "common/model/rows.h"
#include "common/weights/safetensors.h"
#include "common/model/streamed_weights.h"
#include "common/model/weight_provider.h"
#include "common/model/weight_set.h"

namespace splitspec {

// Where the files trained for a model live (early exits, LUT tables, a
// recurrent head): its directory, or beside a GGUF file FILE.gguf the
// directory FILE.splitspec, which need not exist until something is trained.
std::string model_side_dir(const std::string& model_path);

struct ForwardRequest {
  std::vector<int32_t> tokens;
  // Absolute positions of `tokens`; empty means cache.size(), cache.size()+1, ...
  std::vector<int64_t> positions;
  // [n, cache.size()+n], true where row i may attend. Empty means causal.
  // Tree masks come from tree_attention_mask() (token_tree.h).
  AttentionMask mask;
  // Rows of `tokens` whose logits are wanted; nullopt means every row.
  std::optional<std::vector<int64_t>> logits_rows;
  // Layers (0-based) whose output hidden states ([n, hidden]) are returned.
  std::vector<int64_t> hidden_layers;
  // Called after each layer (0-based) in `tap_layers` (every layer when it
  // is empty) with its output [n, hidden], while the forward goes on: early
  // exits verify there. The rows are only valid during the call. An
  // exception leaves the cache unchanged.
  std::function<void(int64_t layer, RowsView hidden)> on_layer;
  std::vector<int64_t> tap_layers;
  // Also return the logits rows' hidden states after the final norm: what
  // the LM head reads (a drafter conditioned on the target reads it too).
  bool final_hidden = false;
  // The new rows' inputs [n, hidden], taken as they are instead of the
  // tokens' embedding rows (the tokens still count and are checked): an MTP
  // block's input is a projection of an embedding and the target's hidden
  // state. Empty: the embedding.
  Rows inputs;
  // With delta-rule layers: how many of the last rows a rollback may return
  // to, beyond the model's state window (a verification's root and draft
  // nodes), so their states are kept; a tree's are kept whatever this says.
  int64_t rollback_rows = 0;
  // Rows (of `tokens`) whose hidden states after the final norm are wanted
  // without their logits (ForwardResult::final_hidden_rows): a model's own
  // MTP head reads the target's at every position, the prompt's included.
  std::vector<int64_t> final_hidden_rows;
  // Only each logits row's argmax (its first maximum) is needed: a backend
  // may answer with ForwardResult::argmax and no logits (a GPU then sends 4
  // bytes a row to the host, not the vocabulary's logits). The CPU returns
  // the logits.
  bool argmax_only = false;
};

struct ForwardResult {
  Rows logits;                     // [rows, vocab]; empty where argmax answers an argmax_only request
  std::vector<int32_t> argmax;     // per logits row, where a backend computed it
  std::map<int64_t, Rows> hidden;  // layer -> [n, hidden]
  Rows final_hidden;               // [rows, hidden] when asked for
  Rows final_hidden_rows;          // [final_hidden_rows.size(), hidden]: the request's final_hidden_rows'
};

// What every backend's forward checks of a request against a KV store of
// `past` entries and `capacity` slots, and so refuses alike: tokens,
// positions, mask, logits rows and layers. Returns each new row's visible
// slots, increasing (causal when the mask is empty). Throws splitspec::Error
// naming the problem.
std::vector<std::vector<int32_t>> check_forward_request(const ModelConfig& config, const ForwardRequest& request,
                                                        int64_t past, int64_t capacity);

// A model's files opened for reading its tensors as stored: its config (the
// context capped at model_context_limit(), every end-of-generation id of its
// tokenizer added) and its tensors by our names, in place (weight_set.h's
// WeightSource). Model::load builds its weights from it; a backend with a
// layout of its own uploads from it.
struct ModelSource {
  ModelConfig config;
  std::string name;        // the file's stem, or the directory's name
  std::string where;       // for errors: the file, or the directory's files
  WeightSource tensors;
  // Drops a tensor's file pages once a copy of it is held (may be empty).
  std::function<void(const std::string& name)> release;
  // What `tensors` point into: the mapping, and permuted copies by name.
  std::shared_ptr<const void> mapping;
  std::unique_ptr<std::map<std::string, WeightBytes>> copies;
};
// Throws splitspec::Error for a path that is neither a GGUF file nor a model
// directory, and for an unsupported or malformed model.
ModelSource open_model_source(const std::string& path);

// Bytes of the weights of the model at `path` (a GGUF file or a directory)
// as stored: what an in-memory load holds, and what a memory budget's
// percentage is of.
uint64_t stored_weight_bytes(const std::string& path);

// RoPE angle tables [max_position_embeddings, rotary_dims()/2], computed in
// double as the reference implementations do, so far positions keep their
// precision: for the global layers (rope_theta, Llama 3's or LongRoPE's
// divisors, times LongRoPE's attention factor), or with `local` for Gemma 3's
// sliding-window layers (rope_local_theta alone).
void rope_tables(const ModelConfig& config, std::vector<float>& cos, std::vector<float>& sin, bool local = false);

class Model {
 public:
  // Loads a model as it was downloaded: a GGUF file, or a directory of
  // config.json and model.safetensors (or shards), Hugging Face's or ours.
  // Weights stay in their stored types, mapped from the file; with `type`,
  // the matrices are converted to it in memory instead. The context is
  // capped at model_context_limit() (model_config.h).
  static std::shared_ptr<Model> load(const std::string& path, std::optional<WType> type = std::nullopt);
  // A model on weights already built (the trainer's: model_weights.h).
  static std::shared_ptr<Model> from_weight_set(const ModelConfig& config, WeightSet weights, std::string name);
  // The model at `path` (a GGUF file, or a directory of ours or Hugging
  // Face's) with its weights streamed from disk under options.budget_bytes
  // (streamed_weights.h): same forward, bitwise the same logits, one forward
  // at a time. weights() then holds no tensors.
  static std::shared_ptr<Model> load_streamed(const std::string& path, const StreamOptions& options);
  // Random weights, for tests and benchmarks of any size, the matrices
  // stored as `type`, normal with deviation `scale` (larger ones give a
  // random model confident logits, whose greedy tokens rounding does not
  // flip).
  static std::shared_ptr<Model> random(const ModelConfig& config, uint64_t seed, WType type = WType::F32,
                                       float scale = 0.02f);

  const ModelConfig& config() const { return config_; }
  // The weights as the forward reads them (empty for a streamed model).
  const WeightSet& weight_set() const { return weights_; }
  // The layer matrices' type.
  WType weight_type() const;
  // WeightSet::digest() of the weights, computed on each call (it reads
  // them all); for a streamed model the same digest of its files, read once
  // and kept beside them (cached_weights_digest).
  std::string weights_digest() const;
  // The final norm's gains [hidden].
  const float* final_norm() const;
  // LM-head rows `ids` as floats [ids.size(), hidden]. In-memory models only.
  Rows head_rows(const std::vector<int64_t>& ids) const;
  // Bytes of the weights at their types (for a streamed model: if it were
  // all loaded).
  size_t weight_bytes() const;
  // The streaming state of a streamed model, else null.
  const StreamedWeights* stream() const { return stream_.get(); }
  const std::string& name() const { return name_; }

  // The element type of the caches new_cache() makes (default F32). Set it
  // before the model is shared: a decoder and its verifier must agree on it
  // for their outputs to match (kv_cache.h).
  void set_kv_type(KVType type) { kv_type_ = type; }
  KVType kv_type() const { return kv_type_; }
  KVCache new_cache(int64_t capacity = 0) const;  // 0: max_position_embeddings
  // With delta-rule layers: how many entries back the caches new_cache()
  // makes keep recurrent states for a rollback, past their last forward's
  // rows (RecurrentStates; default kDefaultStateWindow). Each state holds
  // every such layer's, ModelConfig::ssm_state_floats() floats a layer.
  void set_state_window(int64_t entries) { state_window_ = entries; }
  int64_t state_window() const { return state_window_; }

  // Appends the new tokens to `cache` and returns the requested logits. On
  // invalid input it throws splitspec::Error and leaves the cache unchanged.
  ForwardResult forward(const ForwardRequest& request, KVCache& cache) const;

  // One sequence of a batched forward: its request and its own KV cache.
  struct BatchItem {
    const ForwardRequest* request;
    KVCache* cache;
  };
  // The forwards of several sequences as one: each weight matrix is read once
  // for every sequence's rows, while attention reads each sequence's own cache
  // under its own mask. The kernels are batch-invariant, so result i is
  // bitwise what forward() returns for item i alone (forward() is a batch of
  // one). Each item's on_layer sees its own rows. Throws splitspec::Error on
  // invalid input in any item (or two items sharing a cache); whatever it
  // throws (an on_layer's error, bad_alloc, a failed read of a streamed
  // unit), every cache is left as it was.
  std::vector<ForwardResult> forward_batch(const std::vector<BatchItem>& items) const;

  // The final norm and LM head on hidden rows [m, hidden]: logits [m, vocab].
  // In-memory models only (a streamed one reads its head inside forward()).
  Rows head_logits(RowsView hidden) const;

  // Writes the model to `dir`, converted to `type` if given. In-memory
  // models only.
  void save(const std::string& dir, std::optional<WType> type = std::nullopt) const;

 private:
  Model(ModelConfig config, WeightSet weights, std::string name);
  // The final norm on hidden rows [m, hidden].
  Rows final_norm_rows(RowsView hidden) const;
  // Logits soft-capped in place, where the model caps them.
  void soft_cap(Rows& logits) const;
  // The per-layer inputs of tokens `ids` whose embedding rows are `x`:
  // out [layers x n, per_layer_input_size], layer by layer.
  void per_layer_inputs(const std::vector<int64_t>& ids, const Rows& x, Rows& out) const;
  ModelConfig config_;
  WeightSet weights_;
  std::string name_;
  std::vector<float> rope_cos_;  // [max_positions, rotary/2]
  std::vector<float> rope_sin_;
  std::vector<float> local_cos_, local_sin_;  // the sliding-window layers' (Gemma 3 and 4)
  std::unique_ptr<StreamedWeights> stream_;
  std::string stream_dir_;  // the streamed model's directory
  ResidentWeights resident_{weights_};
  // What the forward reads its weights from: resident_, or stream_.
  WeightProvider* provider_ = &resident_;
  KVType kv_type_ = KVType::F32;
  int64_t state_window_ = kDefaultStateWindow;
  // Its forwards' thread counts, by their timings (thread_choice.h).
  std::unique_ptr<kernels::ThreadChoice> thread_choice_ = std::make_unique<kernels::ThreadChoice>();
};

}  // namespace splitspec

#pragma once
// The decoder-only models SplitSpec runs, as one LLaMA-shaped definition
// with options: what a Hugging Face config.json or a GGUF file's metadata
// (gguf_model.h) says, read as the model's family (family.h) reads it.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace splitspec {

// The gated MLP's activation: SwiGLU's silu, or GeGLU's GELU in its tanh
// form (Gemma).
enum class Activation : uint8_t { kSilu, kGeluTanh };

// Every family is the LLaMA decoder (RMSNorm, RoPE on rotated halves, grouped
// query attention, a gated MLP); they differ only in the options below and in
// how their files name and fuse tensors.
struct ModelConfig {
  // The family (family.h) by its llama.cpp architecture name (GGUF
  // general.architecture).
  std::string architecture = "llama";
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless given
  int64_t vocab_size = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 1;  // -1: none
  int64_t eos_token_id = 2;
  // Every id config.json lists as an end of generation (Llama 3 lists
  // three); eos_token_id is the first.
  std::vector<int64_t> eos_token_ids;
  // Biases on the query, key and value projections.
  bool attention_bias = false;
  // RMSNorm on each head's query and key before RoPE.
  bool qk_norm = false;
  // RoPE frequency divisors [head_dim / 2], empty for none: Llama 3's
  // rope_scaling, computed from config.json as Hugging Face does, or a GGUF
  // file's rope_freqs tensor (which holds the same numbers).
  std::vector<float> rope_freq_factors;
  // The rope_scaling object as config.json gave it, so a converted model
  // writes it back; null-equivalent when empty.
  std::string rope_scaling_json;
  // Sliding-window attention's window. With sliding_window_pattern 0
  // (Mistral, Phi-3) the context is capped to it, where every model attends
  // alike. 0: none.
  int64_t sliding_window = 0;
  // Interleaved local and global attention (Gemma 3): every layer l with
  // l % pattern < pattern - 1 attends only to keys less than sliding_window
  // positions back (a key at distance sliding_window is out, as llama.cpp's
  // LLAMA_SWA_TYPE_STANDARD), with RoPE base rope_local_theta; every
  // pattern-th layer attends to everything with rope_theta. 0: no such
  // layers.
  int64_t sliding_window_pattern = 0;
  double rope_local_theta = 10000.0;
  Activation activation = Activation::kSilu;
  // Gemma: the embedding rows times sqrt(hidden_size), and RMSNorms on the
  // attention's and the MLP's outputs before their residual adds. Its
  // RMSNorm gains are held as llama.cpp's files hold them, 1 + w; Hugging
  // Face's files hold w (safetensors_source adds the 1).
  bool scale_embeddings = false;
  bool post_norms = false;
  // The query's scale is 1 / sqrt(query_pre_attn_scalar); 0: 1 / sqrt(head_dim).
  double query_pre_attn_scalar = 0.0;
  // LongRoPE (Phi-3.5, Phi-4-mini): frequency divisors [rotary_dim / 2] for a
  // context up to rope_original_context (short) and past it (long), chosen
  // once by the context the model runs (max_position_embeddings), as
  // llama.cpp chooses by its context size; cos and sin are scaled by
  // rope_attention_factor. Empty: none (rope_freq_factors may hold Llama 3's).
  std::vector<float> rope_short_factors, rope_long_factors;
  int64_t rope_original_context = 0;
  double rope_attention_factor = 1.0;
  // How many of a head's dims rotate (Phi-4-mini: 96 of 128), pairs (i, i +
  // rotary_dim / 2); the rest pass. 0: all of them.
  int64_t rotary_dim = 0;
  // The context the file declares when max_position_embeddings was lowered
  // at load to what this process runs (model_context_limit()); 0 when not.
  int64_t declared_context = 0;
  // Hybrid decoders (Qwen3.5): layer l with recurrent_layers[l] set is a
  // gated delta-rule layer (linear attention: a short causal convolution
  // over the projected q, k and v, then a recurrent state per key head of
  // ssm_head_dim x ssm_head_dim that each token decays and corrects), the
  // others full attention. Empty: every layer attends.
  std::vector<uint8_t> recurrent_layers;
  int64_t ssm_conv_kernel = 0;  // the convolution's taps (it keeps kernel - 1 inputs)
  int64_t ssm_key_heads = 0;    // query and key heads of a delta-rule layer
  int64_t ssm_value_heads = 0;  // value heads (a multiple of the key heads), each with a state
  int64_t ssm_head_dim = 0;     // the size of every such head
  // The query projection gives each head's query and then a gate of the
  // same size; the attention's output is multiplied by sigmoid(gate) before
  // the output projection (Qwen3.5's full-attention layers).
  bool attn_output_gate = false;
  // Gemma 4. Local (sliding-window) layers may have their own head size,
  // key-value heads and rotary size (0: the global layers'); the global
  // layers' RoPE divisors (rope_freq_factors) are theirs alone.
  int64_t local_head_dim = 0, local_kv_heads = 0, local_rotary_dim = 0;
  // Per layer, the MLP's width, where layers differ (empty: intermediate_size).
  std::vector<int64_t> layer_intermediate_sizes;
  // The last shared_kv_layers layers compute no keys and values: each reads
  // those of the last earlier layer of its kind (kv_source_layer).
  int64_t shared_kv_layers = 0;
  // Layers whose value is their key's projection (no value matrix).
  std::vector<uint8_t> value_is_key_layers;
  // Values RMS-normed without a gain before they are cached.
  bool value_norm = false;
  // Per-layer inputs: each token's row of a second embedding [vocab, layers x
  // per_layer_input_size], mixed with a projection of its embedding; every
  // layer gates its share into its output (Gemma 4's E2B and E4B). 0: none.
  int64_t per_layer_input_size = 0;
  // Every layer's output multiplied by a learned scalar.
  bool layer_output_scale = false;
  // Logits soft-capped: cap * tanh(logit / cap). 0: none.
  double final_logit_softcap = 0.0;

  // Parameter count of the model this config describes.
  int64_t num_parameters() const;
  // Whether layer l attends through a sliding window (sliding_window_pattern).
  bool layer_is_sliding(int64_t l) const {
    return sliding_window_pattern > 0 && sliding_window > 0 && l % sliding_window_pattern < sliding_window_pattern - 1;
  }
  int64_t rotary_dims() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  // Layer l's head size, key-value heads, rotary size and MLP width.
  int64_t layer_head_dim(int64_t l) const {
    return layer_is_sliding(l) && local_head_dim > 0 ? local_head_dim : head_dim;
  }
  int64_t layer_kv_heads(int64_t l) const {
    return layer_is_sliding(l) && local_kv_heads > 0 ? local_kv_heads : num_key_value_heads;
  }
  int64_t local_rotary_dims() const {
    if (local_rotary_dim > 0) return local_rotary_dim;
    return local_head_dim > 0 ? local_head_dim : rotary_dims();
  }
  int64_t layer_rotary_dims(int64_t l) const { return layer_is_sliding(l) ? local_rotary_dims() : rotary_dims(); }
  int64_t layer_intermediate_size(int64_t l) const {
    return layer_intermediate_sizes.empty() ? intermediate_size : layer_intermediate_sizes[static_cast<size_t>(l)];
  }
  // The layer whose keys and values layer l attends over: its own, or for
  // a shared layer llama.cpp's choice, the last layer with its own keys
  // and values (a global one) or the one before it (a local one).
  int64_t kv_source_layer(int64_t l) const {
    const int64_t first_shared = num_hidden_layers - shared_kv_layers;
    if (shared_kv_layers == 0 || l < first_shared) return l;
    return first_shared - (layer_is_sliding(l) ? 2 : 1);
  }
  bool layer_has_kv(int64_t l) const { return kv_source_layer(l) == l && !layer_is_recurrent(l); }
  bool layer_value_is_key(int64_t l) const {
    return !value_is_key_layers.empty() && value_is_key_layers[static_cast<size_t>(l)] != 0;
  }
  // The widest head and MLP of any layer (buffers).
  int64_t max_head_dim() const { return std::max(head_dim, local_head_dim); }
  int64_t max_kv_heads() const { return std::max(num_key_value_heads, local_kv_heads); }
  int64_t max_intermediate_size() const {
    int64_t m = intermediate_size;
    for (int64_t i : layer_intermediate_sizes) m = std::max(m, i);
    return m;
  }
  bool layer_is_recurrent(int64_t l) const {
    return !recurrent_layers.empty() && recurrent_layers[static_cast<size_t>(l)] != 0;
  }
  bool has_recurrent_layers() const {
    for (uint8_t r : recurrent_layers)
      if (r) return true;
    return false;
  }
  // A delta-rule layer's sizes: its keys' (and queries'), its values', the
  // convolution's channels (q, k and v), and the floats one sequence's state
  // takes after a token (the convolution's last kernel - 1 inputs, then
  // every value head's state).
  int64_t ssm_key_dim() const { return ssm_key_heads * ssm_head_dim; }
  int64_t ssm_value_dim() const { return ssm_value_heads * ssm_head_dim; }
  int64_t ssm_channels() const { return 2 * ssm_key_dim() + ssm_value_dim(); }
  int64_t ssm_conv_floats() const { return (ssm_conv_kernel - 1) * ssm_channels(); }
  int64_t ssm_state_floats() const { return ssm_conv_floats() + ssm_value_heads * ssm_head_dim * ssm_head_dim; }
  // The frequency divisors RoPE uses (Llama 3's, or LongRoPE's by the
  // context), empty for none.
  const std::vector<float>& rope_divisors() const {
    if (rope_long_factors.empty()) return rope_freq_factors;
    return max_position_embeddings > rope_original_context ? rope_long_factors : rope_short_factors;
  }
  // Throws splitspec::Error naming `source` and the offending field.
  void validate(const std::string& source) const;
};

// Whether `token` ends a generation: EOS or any other end-of-generation id.
bool is_end_of_generation(const ModelConfig& c, int64_t token);

// Llama 3's rope_scaling (type "llama3") as frequency divisors, computed in
// double as Hugging Face's _compute_llama3_parameters does.
std::vector<float> llama3_rope_factors(double theta, int64_t head_dim, double factor, double low_freq_factor,
                                       double high_freq_factor, int64_t original_context);

// The most positions a loaded model runs: real models declare 32K-128K,
// whose KV cache and RoPE tables would not fit a robot's memory. 4096
// unless SPLITSPEC_MAX_CONTEXT says otherwise.
int64_t model_context_limit();
// Lowers c.max_position_embeddings to model_context_limit(), remembering the
// declared one.
void apply_context_limit(ModelConfig& c);

// Reads and validates DIR/config.json (or a config file given directly), or
// a GGUF file's metadata.
ModelConfig load_model_config(const std::string& path);
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
std::string model_config_to_json(const ModelConfig& c);

}  // namespace splitspec

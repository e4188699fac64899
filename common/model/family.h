#pragma once
// Model families by name, as drafters are: one file each under families/
// says everything a family's files differ in (its Hugging Face and GGUF
// architecture names, tensor names, fused tensors, config keys, the options
// its forward takes, its chat template and pre-tokenizer), and one line in
// families/families.inc registers it; applications and tests may register
// their own at run time. Nothing outside those files names an architecture.
// Every family is the LLaMA decoder with the options on ModelConfig.
#include <cstdint>
#include <functional>
#include <optional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/model/model_config.h"
#include "common/model/weight_names.h"
#include "common/tokenizer/chat_template.h"
#include "common/kernels/weight_type.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/weights/gguf.h"
#include "common/weights/safetensors.h"

namespace splitspec {

// A config.json "architectures" entry of the family, with Hugging Face's
// defaults for the keys such a config may omit.
struct HfArchitecture {
  std::string name;        // "LlamaForCausalLM"
  std::string model_type;  // config.json's "model_type", which some configs give alone
  double rms_norm_eps = 1e-6;
  int64_t max_positions = 2048;
  int64_t bos = 1, eos = 2;  // -1: none
  bool tied = false;
  double rope_theta = 10000.0;
};

// Layer matrices a family's files hold as one tensor, their rows one after
// another in the order given (Phi-3's qkv_proj).
struct Fusion {
  std::string name;  // the fused tensor's name in a layer, Hugging Face's ("self_attn.qkv_proj.weight")
  std::vector<LayerMatrix> parts;
};

// A tensor of ours built from the one a family's Hugging Face files hold in
// another form: its type and its bytes ([rows][cols] of the type).
struct HfTensor {
  WType type = WType::F32;
  WeightBytes bytes;
};

// What config.json's attention_bias means to the family.
enum class HfAttentionBias {
  kRefused,       // true is refused (LLaMA's would also bias the output projection)
  kAlways,        // the family always has them; its config does not say (Qwen2)
  kAsConfigured,  // as the config says (Qwen3)
};

struct Family {
  std::string name;                // llama.cpp's architecture name (GGUF general.architecture), and ours
  std::vector<HfArchitecture> hf;  // the first is the one a converted model names
  std::string hf_default_act = "silu";  // hidden_act when config.json gives none
  HfAttentionBias hf_attention_bias = HfAttentionBias::kRefused;
  bool qk_norm = false;  // RMSNorm on each head's query and key: every model of the family has it

  // Tensor names, by the end of a layer tensor's name: where the family's
  // GGUF files name it other than the common names (gguf_model.cpp), and
  // where its Hugging Face files name it other than ours.
  std::vector<std::pair<std::string, std::string>> gguf_names, hf_names;
  std::vector<Fusion> fusions;
  // Its Hugging Face files hold RMSNorm gains less 1 (Gemma's x * (1 + w));
  // ours and GGUF files hold 1 + w.
  bool hf_gains_less_one = false;
  // llama.cpp's files of it interleave the query's and key's rows for RoPE
  // (its llama architecture).
  bool gguf_rope_interleaved = false;
  // llama.cpp reads its linear RoPE scaling as rope.scaling.factor, not as a
  // rope_freqs tensor.
  bool gguf_linear_rope_scaling = false;
  // Its GGUF files may give the MLP width and key-value heads per layer,
  // which its read_gguf reads (llama.cpp's get_key_or_arr).
  bool gguf_per_layer_counts = false;
  // The training module trains it (train/trainable_llama.h).
  bool trainable = false;

  // Config quirks past the common keys: read after them (config.json, GGUF
  // metadata) and written after them; each may throw splitspec::Error.
  std::function<void(const nlohmann::json& config, ModelConfig& c, const std::string& source)> read_hf;
  std::function<void(const ModelConfig& c, nlohmann::json& config)> write_hf;
  std::function<void(const GgufFile& f, ModelConfig& c)> read_gguf;
  // Tensors its Hugging Face files hold in another form than ours (as
  // llama.cpp's converter turns them): ours (`name`, `shape`) from the
  // file's tensor `t`, or nullopt where it is ours as it is. Throws
  // splitspec::Error for a tensor of another shape or type. A family with
  // it is not streamed from its directory, which reads tensors as stored.
  std::function<std::optional<HfTensor>(const std::string& name, const TensorInfo& t,
                                        const std::vector<int64_t>& shape, const ModelConfig& c)>
      hf_tensor;
  std::function<void(const ModelConfig& c, GgufWriter& g, const std::string& name)> write_gguf;

  // The chat templates and pre-tokenizers only it uses, registered with it
  // in the tokenizer's tables (the built-in families' files name the
  // built-in ones their models' files name). A model's own files say which
  // it follows (tokenizer.chat_template, tokenizer.ggml.pre), as in
  // llama.cpp, so a file of another family may follow them too.
  std::vector<ChatTemplateDef> chat_templates;
  std::vector<PreTokenizerDef> pre_tokenizers;
};

// For the families' config quirks: a config.json number or integer, or the
// fallback where the key is absent or null (throws naming the key when it
// has another type), and a GGUF metadata number.
double config_number(const nlohmann::json& j, const char* key, double fallback, const std::string& source);
int64_t config_integer(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& source);
double gguf_number(const GgufFile& f, const std::string& key, double fallback);
// The period of interleaved local and global layers (ModelConfig::
// sliding_window_pattern) from a GGUF key giving it as a period or as a
// per-layer list of booleans (true where local), `fallback` where absent.
// Throws splitspec::Error for a list that is not every pattern-th layer global.
int64_t gguf_sliding_pattern(const GgufFile& f, const std::string& key, int64_t layers, int64_t fallback);

// The built-in families (families.inc's order), then registered ones.
std::vector<const Family*> families();
// "llama, qwen2, ..." (for messages and help).
std::string family_names();
// Null for a name not registered.
const Family* lookup_family(const std::string& name);
// Throws splitspec::Error naming the supported ones.
const Family& find_family(const std::string& name);
inline const Family& family_of(const ModelConfig& c) { return find_family(c.architecture); }
// Registers `f` with its templates and pre-tokenizers. Throws
// splitspec::Error for a name taken (its own, or a Hugging Face
// architecture's).
void register_family(Family f);

}  // namespace splitspec

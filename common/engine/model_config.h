#pragma once
// The subset of a Hugging Face LlamaForCausalLM config.json that SplitSpec runs.
#include <cstdint>
#include <string>

namespace splitspec {

struct ModelConfig {
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
  int64_t bos_token_id = 1;
  int64_t eos_token_id = 2;

  // Parameter count of the model this config describes.
  int64_t num_parameters() const;
  // Throws splitspec::Error naming `source` and the offending field.
  void validate(const std::string& source) const;
};

// Reads and validates DIR/config.json (or a file path given directly).
ModelConfig load_model_config(const std::string& path);
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
std::string model_config_to_json(const ModelConfig& c);

}  // namespace splitspec

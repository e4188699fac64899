// Qwen2 and Qwen2.5: LLaMA with biases on the query, key and value
// projections, which its config never mentions.
// Its models' files name the built-in chatml template and qwen2 pre-tokenizer.
#include "common/model/family.h"

namespace splitspec {

Family qwen2_family() {
  Family f;
  f.name = "qwen2";
  f.hf = {{"Qwen2ForCausalLM", "qwen2", 1e-6, 32768, -1, -1}};
  f.hf_attention_bias = HfAttentionBias::kAlways;
  return f;
}

}  // namespace splitspec

// Qwen3: LLaMA with an RMSNorm on each head's query and key before RoPE,
// a head size its config gives apart from hidden / heads, and biases only
// where attention_bias says.
// Its models' files name the built-in chatml template and qwen2 pre-tokenizer.
#include "common/model/family.h"

namespace splitspec {

Family qwen3_family() {
  Family f;
  f.name = "qwen3";
  f.hf = {{"Qwen3ForCausalLM", "qwen3", 1e-6, 32768, -1, -1}};
  f.hf_attention_bias = HfAttentionBias::kAsConfigured;
  f.qk_norm = true;
  return f;
}

}  // namespace splitspec

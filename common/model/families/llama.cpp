// LLaMA (1, 2, 3 and its rope_scaling), Mistral, SmolLM and TinyLlama: the
// decoder every other family is an option on. llama.cpp's files of it
// interleave the query's and key's rows for RoPE.
#include "common/model/family.h"

namespace splitspec {

Family llama_family() {
  Family f;
  f.name = "llama";
  f.hf = {{"LlamaForCausalLM", "llama", 1e-6, 2048, 1, 2},
          {"MistralForCausalLM", "mistral", 1e-6, 4096 * 32, 1, 2}};
  f.gguf_rope_interleaved = true;
  f.trainable = true;
  // Its models' chat formats and vocabularies differ (Llama 2's, Llama 3's,
  // SmolLM's): each model's files name their own.
  return f;
}

}  // namespace splitspec

// Phi-3, Phi-3.5 and Phi-4-mini (LongRoPE and partial rotary embeddings are
// options every family reads): LLaMA whose files fuse the query, key and
// value rows into qkv_proj (llama.cpp's attn_qkv) and the gate's and up
// projection's into gate_up_proj (llama.cpp's ffn_up).
// Its models' files name the built-in phi3 template (and SentencePiece).
#include "common/model/family.h"

namespace splitspec {

Family phi3_family() {
  Family f;
  f.name = "phi3";
  f.hf = {{"Phi3ForCausalLM", "phi3", 1e-5, 4096, 1, 32000}};
  f.fusions = {{"self_attn.qkv_proj.weight", {LayerMatrix::kQ, LayerMatrix::kK, LayerMatrix::kV}},
               {"mlp.gate_up_proj.weight", {LayerMatrix::kGate, LayerMatrix::kUp}}};
  f.gguf_names = {{"self_attn.qkv_proj.weight", "attn_qkv.weight"}, {"mlp.gate_up_proj.weight", "ffn_up.weight"}};
  return f;
}

}  // namespace splitspec

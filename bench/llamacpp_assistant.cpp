// llama.cpp's side of the Gemma 4 assistant checks (tests/families/
// gemma4_test.py): its draft-mtp path over a gemma4-assistant model, as
// common/speculative.cpp drives it when the draft shares the target's
// memory, on the libllama that npm's node-llama-cpp ships. Built by the
// test against that release's llama.h; never linked into SplitSpec.
//
//   llamacpp_assistant BINS TARGET.gguf ASSISTANT.gguf GAMMA IDS_FILE OUT.bin
//
// For each prompt (ids a line): the target decodes it on llama.cpp's exact
// path (F32 KV cache, no flash attention) with its hidden state after the
// final norm on for every row; its greedy next token x_P; then the assistant
// (an MTP context whose memory is the target's) reads x_P with the target's
// last row at position P, and each draft with its own projected-out row at
// that same position: GAMMA greedy drafts. Prints one JSON line a prompt
// {"next", "drafts"}; OUT.bin gets each draft step's logits (float32 rows).
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench/llamacpp_heads.h"

int main(int argc, char** argv) {
  if (argc != 7) heads::die("usage: llamacpp_assistant BINS TARGET.gguf ASSISTANT.gguf GAMMA IDS_FILE OUT.bin");
  llama_log_set(heads::quiet, nullptr);
  ggml_backend_load_all_from_path(argv[1]);
  llama_model_params mp = llama_model_default_params();
  llama_model* target = llama_model_load_from_file(argv[2], mp);
  if (!target) heads::die("cannot load the target");
  mp.load_mtp = true;
  llama_model* assistant = llama_model_load_from_file(argv[3], mp);
  if (!assistant) heads::die("cannot load the assistant");
  const int gamma = std::atoi(argv[4]);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(target));
  const int n_embd = llama_model_n_embd(target);
  llama_context* tgt = heads::context(target, false, nullptr);
  llama_set_embeddings_nextn(tgt, true, false);
  llama_context* dft = heads::context(assistant, true, tgt);
  llama_set_embeddings_nextn(dft, true, true);
  std::ofstream out(argv[6], std::ios::binary);
  if (!out) heads::die("cannot open the output");
  heads::TokenRowsBatch m(1, n_embd);
  // The assistant's memory is the target's: clearing the target's clears both.
  heads::each_prompt(argv[5], tgt, nullptr, n_vocab, [&](const std::vector<llama_token>& ids, int next) {
    const int P = static_cast<int>(ids.size());
    const float* last = llama_get_embeddings_nextn_ith(tgt, P - 1);
    std::vector<float> h(last, last + n_embd);
    std::vector<int> drafts;
    int token = next;
    for (int k = 0; k < gamma; ++k) {
      heads::fill(m.b, {token}, P);
      std::memcpy(m.b.embd, h.data(), sizeof(float) * n_embd);
      if (llama_decode(dft, m.b) != 0) heads::die("the assistant's decode failed");
      const float* logits = llama_get_logits_ith(dft, 0);
      out.write(reinterpret_cast<const char*>(logits), sizeof(float) * n_vocab);
      token = heads::argmax(logits, n_vocab);
      drafts.push_back(token);
      const float* own = llama_get_embeddings_nextn_ith(dft, 0);
      h.assign(own, own + n_embd);
    }
    return drafts;
  });
  llama_free(dft);
  llama_free(tgt);
  llama_model_free(assistant);
  llama_model_free(target);
  return 0;
}

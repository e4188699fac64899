// llama.cpp's side of the EAGLE-3 checks (tests/families/eagle3_test.py):
// its own draft-eagle3 path, as common/speculative.cpp drives it, on the
// libllama that npm's node-llama-cpp ships. Built by the test against that
// release's llama.h; never linked into SplitSpec.
//
//   llamacpp_eagle3 BINS TARGET.gguf EAGLE3.gguf GAMMA IDS_FILE OUT.bin
//
// For each prompt (ids a line): the target decodes it on llama.cpp's exact
// path (F32 KV cache, no flash attention) with the inputs of the head's
// three target layers extracted; its greedy next token x_P; the head's
// encoder fuses each position's three rows (fc) into g; its decoder reads
// token x_{k+1} with g_k at position k for the prompt, as draft-eagle3's
// process() does, then x_P with g_{P-1} and each draft with its own
// pre-norm output, as its draft() does: GAMMA greedy drafts (the head's
// d2t maps them to target ids). Prints one JSON line a prompt
// {"next", "drafts"}; OUT.bin gets each draft step's logits over the
// target's vocabulary (float32 rows, -inf outside the draft vocabulary).
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench/llamacpp_heads.h"

int main(int argc, char** argv) {
  if (argc != 7) heads::die("usage: llamacpp_eagle3 BINS TARGET.gguf EAGLE3.gguf GAMMA IDS_FILE OUT.bin");
  llama_log_set(heads::quiet, nullptr);
  ggml_backend_load_all_from_path(argv[1]);
  llama_model* target = llama_model_load_from_file(argv[2], llama_model_default_params());
  llama_model* head = llama_model_load_from_file(argv[3], llama_model_default_params());
  if (!target || !head) heads::die("cannot load the models");
  if (llama_model_target_layer_ids_n(head) != 3) heads::die("the head does not read three target layers");
  const int32_t* layers = llama_model_target_layer_ids(head);
  const int gamma = std::atoi(argv[4]);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(target));
  const int n_tgt = llama_model_n_embd(target), n_dec = llama_model_n_embd(head);
  llama_context* tgt = heads::context(target, false, nullptr);
  for (int k = 0; k < 3; ++k) llama_set_embeddings_layer_inp(tgt, static_cast<uint32_t>(layers[k]), true);
  llama_context* dft = heads::context(head, false, tgt);
  llama_set_embeddings_nextn(dft, true, true);
  std::ofstream out(argv[6], std::ios::binary);
  if (!out) heads::die("cannot open the output");
  heads::each_prompt(argv[5], tgt, dft, n_vocab, [&](const std::vector<llama_token>& ids, int next) {
    const int P = static_cast<int>(ids.size());
    // Each position's three layer inputs side by side, fused by the encoder.
    std::vector<float> features(static_cast<size_t>(P) * 3 * n_tgt);
    for (int k = 0; k < 3; ++k) {
      const float* rows = llama_get_embeddings_layer_inp(tgt, static_cast<uint32_t>(layers[k]));
      if (!rows) heads::die("a target layer's input was not extracted");
      for (int i = 0; i < P; ++i)
        std::memcpy(features.data() + (static_cast<size_t>(i) * 3 + k) * n_tgt, rows + static_cast<size_t>(i) * n_tgt,
                    sizeof(float) * n_tgt);
    }
    llama_batch enc = {P, nullptr, features.data(), nullptr, nullptr, nullptr, nullptr};
    if (llama_encode(dft, enc) != 0) heads::die("the encoder failed");
    std::vector<float> g(llama_get_embeddings_nextn(dft), llama_get_embeddings_nextn(dft) + static_cast<size_t>(P) * n_dec);
    heads::TokenRowsBatch m(P, n_dec);
    // Decodes `toks` at pos0.. with `rows`; a draft step also writes its
    // logits and returns its argmax.
    auto run = [&](const std::vector<llama_token>& toks, const float* rows, int pos0, bool draft) {
      heads::fill(m.b, toks, pos0);
      std::memcpy(m.b.embd, rows, sizeof(float) * n_dec * m.b.n_tokens);
      if (llama_decode(dft, m.b) != 0) heads::die("the head's decode failed");
      if (!draft) return -1;
      const float* logits = llama_get_logits_ith(dft, m.b.n_tokens - 1);
      out.write(reinterpret_cast<const char*>(logits), sizeof(float) * n_vocab);
      return heads::argmax(logits, n_vocab);
    };
    // process(): (x_{k+1}, g_k) at k; then draft(): (x_P, g_{P-1}), then
    // each draft with the head's own pre-norm output.
    if (P > 1) run(std::vector<llama_token>(ids.begin() + 1, ids.end()), g.data(), 0, false);
    std::vector<int> drafts{run({next}, g.data() + static_cast<size_t>(P - 1) * n_dec, P - 1, true)};
    for (int k = 1; k < gamma; ++k) {
      const float* own_row = llama_get_embeddings_nextn_ith(dft, 0);
      std::vector<float> own(own_row, own_row + n_dec);
      drafts.push_back(run({drafts.back()}, own.data(), P - 1 + k, true));
    }
    return drafts;
  });
  llama_free(dft);
  llama_free(tgt);
  llama_model_free(head);
  llama_model_free(target);
  return 0;
}

// llama.cpp's side of the MTP checks (tests/families/qwen35_test.py): its
// own MTP draft path, as common/speculative.cpp's draft-mtp drives it, on
// the libllama that npm's node-llama-cpp ships. Built by the test against
// that release's llama.h; never linked into SplitSpec.
//
//   llamacpp_mtp BINS MODEL.gguf GAMMA IDS_FILE OUT.bin
//
// For each prompt (ids a line): the target decodes it on llama.cpp's exact
// path (F32 KV cache, no flash attention) with its MTP embeddings (the
// hidden state after the final norm) on for every row; its greedy next
// token x_P; then an MTP context (LLAMA_CONTEXT_TYPE_MTP over the same
// model) reads token x_q with the target's row q - 1 (zeros for the first)
// for the prompt in one batch, as draft-mtp's process() does, then x_P with
// the target's last row and each draft with the block's own row (its only
// one), as its draft() does: GAMMA greedy drafts. Prints one JSON line a prompt
// {"next", "drafts"}; OUT.bin gets each draft step's logits (float32 rows).
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench/llamacpp_heads.h"

int main(int argc, char** argv) {
  if (argc != 6) heads::die("usage: llamacpp_mtp BINS MODEL.gguf GAMMA IDS_FILE OUT.bin");
  llama_log_set(heads::quiet, nullptr);
  ggml_backend_load_all_from_path(argv[1]);
  llama_model_params mp = llama_model_default_params();
  mp.load_mtp = true;
  llama_model* model = llama_model_load_from_file(argv[2], mp);
  if (!model) heads::die("cannot load the model");
  if (llama_model_n_layer_nextn(model) < 1) heads::die("the model has no MTP block");
  const int gamma = std::atoi(argv[3]);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const int n_embd = llama_model_n_embd(model);
  llama_context* tgt = heads::context(model, false, nullptr);
  llama_set_embeddings_nextn(tgt, true, false);
  llama_context* dft = heads::context(model, true, tgt);
  llama_set_embeddings_nextn(dft, true, true);
  std::ofstream out(argv[5], std::ios::binary);
  if (!out) heads::die("cannot open the output");
  heads::each_prompt(argv[4], tgt, dft, n_vocab, [&](const std::vector<llama_token>& ids, int next) {
    const int P = static_cast<int>(ids.size());
    // Token q with the target's row q - 1, zeros before the first.
    std::vector<float> h(static_cast<size_t>(P + 1) * n_embd, 0.0f);
    for (int q = 1; q <= P; ++q)
      std::memcpy(h.data() + static_cast<size_t>(q) * n_embd, llama_get_embeddings_nextn_ith(tgt, q - 1),
                  sizeof(float) * n_embd);
    // draft-mtp's batch carries both tokens and embeddings.
    heads::TokenRowsBatch m(P + 1, n_embd);
    // Decodes `toks` at pos0.. with `rows`; a draft step also writes its
    // logits and returns its argmax.
    auto run = [&](const std::vector<llama_token>& toks, const float* rows, int pos0, bool draft) {
      heads::fill(m.b, toks, pos0);
      std::memcpy(m.b.embd, rows, sizeof(float) * n_embd * m.b.n_tokens);
      if (llama_decode(dft, m.b) != 0) heads::die("the MTP decode failed");
      if (!draft) return -1;
      const float* logits = llama_get_logits_ith(dft, m.b.n_tokens - 1);
      out.write(reinterpret_cast<const char*>(logits), sizeof(float) * n_vocab);
      return heads::argmax(logits, n_vocab);
    };
    // process(): the prompt's pairs; then draft(): the next token with the
    // target's last row, and each draft with the block's own row.
    run(ids, h.data(), 0, false);
    std::vector<int> drafts{run({next}, h.data() + static_cast<size_t>(P) * n_embd, P, true)};
    for (int k = 1; k < gamma; ++k) {
      const float* own_row = llama_get_embeddings_nextn_ith(dft, 0);
      std::vector<float> own(own_row, own_row + n_embd);
      drafts.push_back(run({drafts.back()}, own.data(), P + k, true));
    }
    return drafts;
  });
  llama_free(dft);
  llama_free(tgt);
  llama_model_free(model);
  return 0;
}

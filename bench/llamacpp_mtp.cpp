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
  std::ifstream in(argv[4]);
  std::ofstream out(argv[5], std::ios::binary);
  if (!in || !out) heads::die("cannot open the ids file or the output");
  std::string line;
  while (std::getline(in, line)) {
    const std::vector<llama_token> ids = heads::parse_ids(line);
    if (ids.empty()) continue;
    const int P = static_cast<int>(ids.size());
    llama_memory_clear(llama_get_memory(tgt), true);
    llama_memory_clear(llama_get_memory(dft), true);
    llama_batch b = llama_batch_init(P + 1, 0, 1);
    heads::fill(b, ids, 0);
    if (llama_decode(tgt, b) != 0) heads::die("the target's decode failed");
    const int next = heads::argmax(llama_get_logits_ith(tgt, P - 1), n_vocab);
    // Token q with the target's row q - 1, zeros before the first.
    std::vector<float> h(static_cast<size_t>(P + 1) * n_embd, 0.0f);
    for (int q = 1; q <= P; ++q)
      std::memcpy(h.data() + static_cast<size_t>(q) * n_embd, llama_get_embeddings_nextn_ith(tgt, q - 1),
                  sizeof(float) * n_embd);
    llama_batch_free(b);
    // draft-mtp's batch carries both tokens and embeddings.
    llama_batch m = llama_batch_init(P + 1, n_embd, 1);
    m.token = static_cast<llama_token*>(std::malloc(sizeof(llama_token) * (P + 1)));
    // Decodes `toks` at pos0.. with `rows`; a draft step also writes its
    // logits and returns its argmax.
    auto run = [&](const std::vector<llama_token>& toks, const float* rows, int pos0, bool draft) {
      heads::fill(m, toks, pos0);
      std::memcpy(m.embd, rows, sizeof(float) * n_embd * m.n_tokens);
      if (llama_decode(dft, m) != 0) heads::die("the MTP decode failed");
      if (!draft) return -1;
      const float* logits = llama_get_logits_ith(dft, m.n_tokens - 1);
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
    std::free(m.token);
    m.token = nullptr;
    llama_batch_free(m);
    std::printf("{\"next\": %d, \"drafts\": [", next);
    for (size_t i = 0; i < drafts.size(); ++i) std::printf("%s%d", i ? ", " : "", drafts[i]);
    std::printf("]}\n");
  }
  llama_free(dft);
  llama_free(tgt);
  llama_model_free(model);
  return 0;
}

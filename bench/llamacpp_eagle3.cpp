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
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

// llama.cpp's staging API (its src/llama-ext.h), declared as it declares
// them: C++ functions of libllama.
LLAMA_API float* llama_get_embeddings_nextn(struct llama_context* ctx);
LLAMA_API float* llama_get_embeddings_nextn_ith(struct llama_context* ctx, int32_t i);
LLAMA_API void llama_set_embeddings_nextn(struct llama_context* ctx, bool value, bool masked);
LLAMA_API void llama_set_embeddings_layer_inp(struct llama_context* ctx, uint32_t lid, bool value);
LLAMA_API float* llama_get_embeddings_layer_inp(struct llama_context* ctx, uint32_t lid);
LLAMA_API const int32_t* llama_model_target_layer_ids(const struct llama_model* model);
LLAMA_API uint32_t llama_model_target_layer_ids_n(const struct llama_model* model);

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "llamacpp_eagle3: %s\n", what.c_str());
  std::exit(1);
}

void quiet(enum ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR || std::getenv("VERBOSE")) std::fputs(text, stderr);
}

llama_context* context(llama_model* model, llama_context* other) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.ctx_other = other;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) die("cannot create a context");
  return ctx;
}

// Tokens at pos0.., one sequence, the last row's output asked for.
void fill(llama_batch& b, const std::vector<llama_token>& toks, int pos0) {
  b.n_tokens = static_cast<int32_t>(toks.size());
  for (int i = 0; i < b.n_tokens; ++i) {
    b.token[i] = toks[i];
    b.pos[i] = pos0 + i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = i == b.n_tokens - 1;
  }
}

int argmax(const float* row, int n) {
  int best = 0;
  for (int v = 1; v < n; ++v)
    if (row[v] > row[best]) best = v;
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) die("usage: llamacpp_eagle3 BINS TARGET.gguf EAGLE3.gguf GAMMA IDS_FILE OUT.bin");
  llama_log_set(quiet, nullptr);
  ggml_backend_load_all_from_path(argv[1]);
  llama_model* target = llama_model_load_from_file(argv[2], llama_model_default_params());
  llama_model* head = llama_model_load_from_file(argv[3], llama_model_default_params());
  if (!target || !head) die("cannot load the models");
  if (llama_model_target_layer_ids_n(head) != 3) die("the head does not read three target layers");
  const int32_t* layers = llama_model_target_layer_ids(head);
  const int gamma = std::atoi(argv[4]);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(target));
  const int n_tgt = llama_model_n_embd(target), n_dec = llama_model_n_embd(head);
  llama_context* tgt = context(target, nullptr);
  for (int k = 0; k < 3; ++k) llama_set_embeddings_layer_inp(tgt, static_cast<uint32_t>(layers[k]), true);
  llama_context* dft = context(head, tgt);
  llama_set_embeddings_nextn(dft, true, true);
  std::ifstream in(argv[5]);
  std::ofstream out(argv[6], std::ios::binary);
  if (!in || !out) die("cannot open the ids file or the output");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<llama_token> ids;
    std::stringstream ss(line);
    std::string tok;
    while (std::getline(ss, tok, ',')) ids.push_back(std::atoi(tok.c_str()));
    if (ids.empty()) continue;
    const int P = static_cast<int>(ids.size());
    llama_memory_clear(llama_get_memory(tgt), true);
    llama_memory_clear(llama_get_memory(dft), true);
    llama_batch b = llama_batch_init(P, 0, 1);
    fill(b, ids, 0);
    if (llama_decode(tgt, b) != 0) die("the target's decode failed");
    llama_batch_free(b);
    const int next = argmax(llama_get_logits_ith(tgt, P - 1), n_vocab);
    // Each position's three layer inputs side by side, fused by the encoder.
    std::vector<float> features(static_cast<size_t>(P) * 3 * n_tgt);
    for (int k = 0; k < 3; ++k) {
      const float* rows = llama_get_embeddings_layer_inp(tgt, static_cast<uint32_t>(layers[k]));
      if (!rows) die("a target layer's input was not extracted");
      for (int i = 0; i < P; ++i)
        std::memcpy(features.data() + (static_cast<size_t>(i) * 3 + k) * n_tgt, rows + static_cast<size_t>(i) * n_tgt,
                    sizeof(float) * n_tgt);
    }
    llama_batch enc = {P, nullptr, features.data(), nullptr, nullptr, nullptr, nullptr};
    if (llama_encode(dft, enc) != 0) die("the encoder failed");
    std::vector<float> g(llama_get_embeddings_nextn(dft), llama_get_embeddings_nextn(dft) + static_cast<size_t>(P) * n_dec);
    llama_batch m = llama_batch_init(P, n_dec, 1);
    m.token = static_cast<llama_token*>(std::malloc(sizeof(llama_token) * P));
    // Decodes `toks` at pos0.. with `rows`; a draft step also writes its
    // logits and returns its argmax.
    auto run = [&](const std::vector<llama_token>& toks, const float* rows, int pos0, bool draft) {
      fill(m, toks, pos0);
      std::memcpy(m.embd, rows, sizeof(float) * n_dec * m.n_tokens);
      if (llama_decode(dft, m) != 0) die("the head's decode failed");
      if (!draft) return -1;
      const float* logits = llama_get_logits_ith(dft, m.n_tokens - 1);
      out.write(reinterpret_cast<const char*>(logits), sizeof(float) * n_vocab);
      return argmax(logits, n_vocab);
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
    std::free(m.token);
    m.token = nullptr;
    llama_batch_free(m);
    std::printf("{\"next\": %d, \"drafts\": [", next);
    for (size_t i = 0; i < drafts.size(); ++i) std::printf("%s%d", i ? ", " : "", drafts[i]);
    std::printf("]}\n");
  }
  llama_free(dft);
  llama_free(tgt);
  llama_model_free(head);
  llama_model_free(target);
  return 0;
}

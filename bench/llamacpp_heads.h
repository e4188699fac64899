// What bench/llamacpp_mtp.cpp and bench/llamacpp_eagle3.cpp share: llama.cpp's
// staging API they call (its src/llama-ext.h, declared as it declares them:
// C++ functions of libllama), its exact path's context, and batches.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "llama.h"

LLAMA_API void llama_set_embeddings_nextn(struct llama_context* ctx, bool value, bool masked);
LLAMA_API float* llama_get_embeddings_nextn(struct llama_context* ctx);
LLAMA_API float* llama_get_embeddings_nextn_ith(struct llama_context* ctx, int32_t i);
LLAMA_API void llama_set_embeddings_layer_inp(struct llama_context* ctx, uint32_t lid, bool value);
LLAMA_API float* llama_get_embeddings_layer_inp(struct llama_context* ctx, uint32_t lid);
LLAMA_API const int32_t* llama_model_target_layer_ids(const struct llama_model* model);
LLAMA_API uint32_t llama_model_target_layer_ids_n(const struct llama_model* model);

namespace heads {

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "llamacpp heads: %s\n", what.c_str());
  std::exit(1);
}

inline void quiet(enum ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR || std::getenv("VERBOSE")) std::fputs(text, stderr);
}

// llama.cpp's exact path (F32 KV cache, no flash attention), one thread;
// `mtp` an MTP context, `other` the target's context a head reads from.
inline llama_context* context(llama_model* model, bool mtp, llama_context* other) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  if (mtp) {
    cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    cp.n_rs_seq = 0;
  }
  cp.ctx_other = other;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) die("cannot create a context");
  return ctx;
}

// Tokens at pos0.., one sequence, the last row's output asked for.
inline void fill(llama_batch& b, const std::vector<llama_token>& toks, int pos0) {
  b.n_tokens = static_cast<int32_t>(toks.size());
  for (int i = 0; i < b.n_tokens; ++i) {
    b.token[i] = toks[i];
    b.pos[i] = pos0 + i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = i == b.n_tokens - 1;
  }
}

inline int argmax(const float* row, int n) {
  int best = 0;
  for (int v = 1; v < n; ++v)
    if (row[v] > row[best]) best = v;
  return best;
}

// "1,2,3" into ids.
inline std::vector<llama_token> parse_ids(const std::string& line) {
  std::vector<llama_token> ids;
  size_t at = 0;
  while (at < line.size()) {
    ids.push_back(std::atoi(line.c_str() + at));
    const size_t comma = line.find(',', at);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return ids;
}

// A batch carrying both tokens and embedding rows, as the draft paths feed
// a head (llama_batch_init allocates one or the other).
struct TokenRowsBatch {
  llama_batch b;
  TokenRowsBatch(int n, int n_embd) : b(llama_batch_init(n, n_embd, 1)) {
    b.token = static_cast<llama_token*>(std::malloc(sizeof(llama_token) * n));
  }
  ~TokenRowsBatch() {
    std::free(b.token);
    b.token = nullptr;
    llama_batch_free(b);
  }
  TokenRowsBatch(const TokenRowsBatch&) = delete;
  TokenRowsBatch& operator=(const TokenRowsBatch&) = delete;
};

// For each prompt of `ids_file` (a line of ids each): clears `tgt`'s memory
// (and `other`'s, where given), decodes the prompt on the target, and hands
// `draft` the ids and the target's greedy next token; prints {"next",
// "drafts"} with the drafts it returns, a line a prompt.
inline void each_prompt(const char* ids_file, llama_context* tgt, llama_context* other, int n_vocab,
                        const std::function<std::vector<int>(const std::vector<llama_token>& ids, int next)>& draft) {
  std::ifstream in(ids_file);
  if (!in) die("cannot open the ids file");
  std::string line;
  while (std::getline(in, line)) {
    const std::vector<llama_token> ids = parse_ids(line);
    if (ids.empty()) continue;
    const int P = static_cast<int>(ids.size());
    llama_memory_clear(llama_get_memory(tgt), true);
    if (other) llama_memory_clear(llama_get_memory(other), true);
    llama_batch b = llama_batch_init(P, 0, 1);
    fill(b, ids, 0);
    if (llama_decode(tgt, b) != 0) die("the target's decode failed");
    llama_batch_free(b);
    const int next = argmax(llama_get_logits_ith(tgt, P - 1), n_vocab);
    const std::vector<int> drafts = draft(ids, next);
    std::printf("{\"next\": %d, \"drafts\": [", next);
    for (size_t i = 0; i < drafts.size(); ++i) std::printf("%s%d", i ? ", " : "", drafts[i]);
    std::printf("]}\n");
  }
}

}  // namespace heads

/* llama.cpp's side of bench/vs_llamacpp.sh, calling the libllama that npm's
 * node-llama-cpp ships (no JavaScript in the timed loop). Built by that
 * script against the llama.h of the same release (taken from the package's
 * own source bundle, never committed). Prints one JSON object.
 *
 *   llamacpp_bench BINS MODEL.gguf info
 *   llamacpp_bench BINS MODEL.gguf tokenize "TEXT"              (BOS first, as generate --prompt)
 *   llamacpp_bench BINS MODEL.gguf greedy THREADS N_NEW ID,ID,...
 *   llamacpp_bench BINS MODEL.gguf greedy-file THREADS N_NEW FILE  (a prompt of ids a line; a JSON line each)
 *   llamacpp_bench BINS MODEL.gguf forward THREADS CTX K,K,... MIN_SECONDS
 *
 * greedy: the prompt in one batch, then one token per decode, argmax of the
 * logits (ties: lowest id), EOS ignored. forward: a context of CTX fixed
 * tokens, then batches of K tokens asking for all K rows' logits (what a
 * verification needs), rolled back after each; the rows are timed in turn,
 * the median reported. Context defaults are llama.cpp's own (its users'
 * experience): flash attention "auto" and an F16 KV cache. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-backend.h"
#include "llama.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static long status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  size_t n = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0) kb = strtol(line + n, NULL, 10);
  if (f) fclose(f);
  return kb;
}

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
  (void)ud;
  if (level >= GGML_LOG_LEVEL_ERROR || getenv("VERBOSE")) fputs(text, stderr);
}

/* "1,2,3" (a trailing newline allowed) into out; -1 if malformed or longer
 * than max. */
static int parse_ids(const char *s, llama_token *out, int max) {
  int n = 0;
  while (*s && *s != '\n' && n < max) {
    char *end;
    const long v = strtol(s, &end, 10);
    if (end == s || v < 0) return -1;
    out[n++] = (llama_token)v;
    if (*end == ',') ++end;
    s = end;
  }
  return *s && *s != '\n' ? -1 : n;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void die(const char *what) {
  fprintf(stderr, "llamacpp_bench: %s\n", what);
  exit(1);
}

static struct llama_context *context(struct llama_model *model, int threads, int n_ctx) {
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n_ctx;
  cp.n_batch = n_ctx;
  cp.n_ubatch = n_ctx;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  struct llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) die("cannot create a context");
  return ctx;
}

/* Decodes `n` tokens at positions pos0.. with every row's logits asked for
 * (or only the last's). */
static void decode(struct llama_context *ctx, struct llama_batch *b, const llama_token *ids, int n, int pos0, int all) {
  b->n_tokens = n;
  for (int i = 0; i < n; ++i) {
    b->token[i] = ids[i];
    b->pos[i] = pos0 + i;
    b->n_seq_id[i] = 1;
    b->seq_id[i][0] = 0;
    b->logits[i] = all || i == n - 1;
  }
  if (llama_decode(ctx, *b) != 0) die("llama_decode failed");
}

int main(int argc, char **argv) {
  if (argc < 4) die("usage: llamacpp_bench BINS MODEL.gguf info|tokenize|greedy|forward ...");
  llama_log_set(quiet, NULL);
  ggml_backend_load_all_from_path(argv[1]);
  llama_backend_init();
  const long rss_before = status_kb("VmRSS:");
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model *model = llama_model_load_from_file(argv[2], mp);
  if (!model) die("cannot load the model");
  const struct llama_vocab *vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  const char *cmd = argv[3];

  if (strcmp(cmd, "info") == 0) {
    printf("{\"llama_version\": \"%s\", \"system_info\": \"%s\", \"n_vocab\": %d, \"n_ctx_train\": %d}\n", llama_version(),
           llama_print_system_info(), n_vocab, llama_model_n_ctx_train(model));
    return 0;
  }
  if (strcmp(cmd, "tokenize") == 0 && argc >= 5) {
    const int cap = (int)strlen(argv[4]) + 2;  /* at most a token a byte, and BOS */
    llama_token *ids = malloc(sizeof(llama_token) * (size_t)cap);
    if (!ids) die("out of memory");
    const int n = llama_tokenize(vocab, argv[4], (int32_t)strlen(argv[4]), ids, cap, 1, 0);
    if (n < 0) die("tokenize failed");
    printf("{\"ids\": [");
    for (int i = 0; i < n; ++i) printf("%s%d", i ? ", " : "", ids[i]);
    printf("]}\n");
    return 0;
  }
  if ((strcmp(cmd, "greedy") == 0 || strcmp(cmd, "greedy-file") == 0) && argc >= 7) {
    const int threads = atoi(argv[4]), n_new = atoi(argv[5]);
    const int n_ctx = llama_model_n_ctx_train(model);
    struct llama_context *ctx = context(model, threads, n_ctx);
    struct llama_batch b = llama_batch_init(n_ctx, 0, 1);
    FILE *prompts = strcmp(cmd, "greedy-file") == 0 ? fopen(argv[6], "r") : NULL;
    if (strcmp(cmd, "greedy-file") == 0 && !prompts) die("cannot open the prompts file");
    char *line = NULL;
    size_t line_cap = 0;
    llama_token *prompt = malloc(sizeof(llama_token) * (size_t)n_ctx);
    llama_token *out = malloc(sizeof(llama_token) * (size_t)(n_new > 0 ? n_new : 1));
    if (!prompt || !out) die("out of memory");
    for (int index = 0;; ++index) {
      const char *spec = argv[6];
      if (prompts) {
        if (getline(&line, &line_cap, prompts) < 0) break;
        spec = line;
      } else if (index > 0) {
        break;
      }
      const int n_prompt = parse_ids(spec, prompt, n_ctx);
      if (n_prompt <= 0) die("bad prompt ids (or more than the context holds)");
      if (n_prompt + n_new > n_ctx) die("prompt and new tokens exceed the context");
      llama_memory_clear(llama_get_memory(ctx), 1);
      const double t0 = now_ms();
      decode(ctx, &b, prompt, n_prompt, 0, 0);
      const double t1 = now_ms();
      int pos = n_prompt;
      for (int i = 0; i < n_new; ++i) {
        const float *logits = llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int v = 1; v < n_vocab; ++v)
          if (logits[v] > logits[best]) best = v;
        out[i] = best;
        if (i + 1 < n_new) decode(ctx, &b, &out[i], 1, pos++, 0);
      }
      const double t2 = now_ms();
      printf("{\"index\": %d, \"output_ids\": [", index);
      for (int i = 0; i < n_new; ++i) printf("%s%d", i ? ", " : "", out[i]);
      printf("], \"prefill_ms\": %.4f, \"decode_ms\": %.4f, \"ms\": %.4f, \"ms_per_token\": %.5f, \"rss_kb\": %ld, "
             "\"peak_rss_kb\": %ld, \"rss_before_load_kb\": %ld, \"threads\": %d}\n",
             t1 - t0, t2 - t1, t2 - t0, (t2 - t0) / n_new, status_kb("VmRSS:"), status_kb("VmHWM:"), rss_before, threads);
      fflush(stdout);
    }
    free(prompt);
    free(out);
    free(line);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
  }
  if (strcmp(cmd, "forward") == 0 && argc >= 8) {
    const int threads = atoi(argv[4]), ctx_len = atoi(argv[5]);
    const double min_ms = atof(argv[7]) * 1e3;
    llama_token ks[16];
    const int n_k = parse_ids(argv[6], ks, 16);
    if (n_k <= 0) die("bad k list");
    int max_k = 0;
    for (int i = 0; i < n_k; ++i) max_k = ks[i] > max_k ? ks[i] : max_k;
    const int n_ctx = llama_model_n_ctx_train(model);
    if (ctx_len + max_k > n_ctx) die("context and k exceed the model's context");
    struct llama_context *ctx = context(model, threads, n_ctx);
    struct llama_batch b = llama_batch_init(n_ctx, 0, 1);
    llama_token *ids = malloc(sizeof(llama_token) * (size_t)n_ctx);
    if (!ids) die("out of memory");
    unsigned seed = 7;
    for (int i = 0; i < ctx_len + max_k; ++i) {
      seed = seed * 1664525u + 1013904223u;
      ids[i] = (llama_token)(seed % (unsigned)n_vocab);
    }
    decode(ctx, &b, ids, ctx_len, 0, 0);
    llama_memory_t mem = llama_get_memory(ctx);
    double *samples[16];
    int counts[16] = {0};
    const int cap = 100000;
    for (int i = 0; i < n_k; ++i) samples[i] = malloc(sizeof(double) * cap);
    const double start = now_ms();
    for (int round = 0; round < 7 || now_ms() - start < min_ms * n_k; ++round) {
      for (int i = 0; i < n_k; ++i) {
        const double t = now_ms();
        decode(ctx, &b, ids + ctx_len, ks[i], ctx_len, 1);
        const double ms = now_ms() - t;
        llama_memory_seq_rm(mem, 0, ctx_len, -1);
        if (round >= 2 && counts[i] < cap) samples[i][counts[i]++] = ms;
      }
      if (round > cap) break;
    }
    printf("{\"rows\": [");
    for (int i = 0; i < n_k; ++i) {
      qsort(samples[i], counts[i], sizeof(double), cmp_double);
      printf("%s{\"context\": %d, \"new_tokens\": %d, \"ms\": %.5f}", i ? ", " : "", ctx_len, ks[i],
             samples[i][counts[i] / 2]);
    }
    printf("], \"rss_kb\": %ld, \"peak_rss_kb\": %ld, \"threads\": %d}\n", status_kb("VmRSS:"), status_kb("VmHWM:"),
           threads);
    return 0;
  }
  die("unknown command or missing arguments");
  return 1;
}

/* llama.cpp's side of bench/vs_llamacpp.sh, calling the libllama that npm's
 * node-llama-cpp ships (no JavaScript in the timed loop). Built by that
 * script against the llama.h of the same release (taken from the package's
 * own source bundle, never committed). Prints one JSON object.
 *
 *   llamacpp_bench BINS MODEL.gguf info
 *   llamacpp_bench BINS MODEL.gguf tokenize "TEXT"              (BOS first, as generate --prompt)
 *   llamacpp_bench BINS MODEL.gguf greedy THREADS N_NEW ID,ID,...
 *   llamacpp_bench BINS MODEL.gguf greedy-file THREADS N_NEW FILE  (a prompt of ids a line; a JSON line each)
 *   llamacpp_bench BINS MODEL.gguf forward THREADS CTX K,K,... MIN_SECONDS [WARMUP MIN_SAMPLES]
 *   llamacpp_bench BINS MODEL.gguf prefill THREADS CTX K,K,... MIN_SECONDS [WARMUP MIN_SAMPLES]
 *   llamacpp_bench BINS MODEL.gguf tokenize-special ADD_SPECIAL PARSE_SPECIAL "TEXT"   (flags 0/1)
 *   llamacpp_bench BINS MODEL.gguf chat TEMPLATE ADD_ASS MESSAGES.json
 *   llamacpp_bench BINS MODEL.gguf greedy-text THREADS N_NEW "PROMPT"
 *   llamacpp_bench BINS IN.gguf quantize OUT.gguf TYPE [THREADS]
 *   llamacpp_bench BINS MODEL.gguf logits THREADS IDS_FILE OUT.bin [OTHER.bin ...]
 *
 * quantize: llama_model_quantize with its default parameters, TYPE one of
 * q4_k_m, q5_k_m, q6_k, q4_k_s, q8_0, q4_0, q3_k_m, q2_k, iq4_xs, iq4_nl, q5_0,
 * q5_1, q4_1 (THREADS <= 0 or absent: all
 * cores); never loads the model for inference. Tensors whose rows don't fit a
 * K-quant's 256-value blocks fall back to other types, as llama.cpp decides.
 * Prints {"out", "type", "ms"}.
 *
 * tokenize, tokenize-special and chat load the vocabulary only, so
 * vocabulary-only GGUFs (llama.cpp's models/ggml-vocab-*.gguf) serve. chat:
 * TEMPLATE is a name llama_chat_apply_template knows, or "model" for the GGUF's own
 * tokenizer.chat_template; MESSAGES.json is [{"role": "...", "content": "..."},
 * ...] (other keys and values are refused); prints {"text", "ids"}, the ids
 * tokenized with add_special and parse_special both on, as llama.cpp's
 * completion tool tokenizes a formatted chat. greedy-text: PROMPT tokenized
 * the same way (llama.cpp's default for a prompt), then as greedy; prints
 * {"prompt_ids", "ids"}.
 *
 * greedy: the prompt in one batch, then one token per decode, argmax of the
 * logits (ties: lowest id), EOS ignored. forward: a context of CTX fixed
 * tokens, then batches of K tokens asking for all K rows' logits (what a
 * verification needs; prefill: only the last row's, as a prompt needs),
 * rolled back after each; the rows are timed in turn,
 * the median reported. Context defaults are llama.cpp's own (its users'
 * experience): flash attention "auto" and an F16 KV cache. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
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

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) die("out of memory");
  return p;
}

static void print_ids(const llama_token *ids, int n) {
  putchar('[');
  for (int i = 0; i < n; ++i) printf("%s%d", i ? ", " : "", ids[i]);
  putchar(']');
}

/* Bytes at or above 0x80 go out as they are: the text is UTF-8. */
static void print_json_string(const char *s, size_t n) {
  putchar('"');
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c == '\n') fputs("\\n", stdout);
    else if (c == '\r') fputs("\\r", stdout);
    else if (c == '\t') fputs("\\t", stdout);
    else if (c < 0x20 || c == 0x7f) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

/* The count in *n; a first guess of a token a byte (and BOS, EOS) retried at
 * the size llama_tokenize asks for. */
static llama_token *tokenize(const struct llama_vocab *vocab, const char *text, size_t len, int add_special,
                             int parse_special, int *n) {
  int cap = (int)len + 2;
  llama_token *ids = xmalloc(sizeof(llama_token) * (size_t)cap);
  *n = llama_tokenize(vocab, text, (int32_t)len, ids, cap, add_special, parse_special);
  if (*n < 0 && *n != INT32_MIN) {
    cap = -*n;
    free(ids);
    ids = xmalloc(sizeof(llama_token) * (size_t)cap);
    *n = llama_tokenize(vocab, text, (int32_t)len, ids, cap, add_special, parse_special);
  }
  if (*n < 0) die("tokenize failed");
  return ids;
}

/* A JSON reader for MESSAGES.json only: an array of objects whose keys and
 * values are all strings. Strings are decoded into fresh buffers. */
struct json_in {
  const char *p;
};

static void json_ws(struct json_in *in) {
  while (*in->p == ' ' || *in->p == '\t' || *in->p == '\n' || *in->p == '\r') ++in->p;
}

static void json_expect(struct json_in *in, char c) {
  json_ws(in);
  if (*in->p != c) die("MESSAGES.json: malformed (want [{\"role\": \"...\", \"content\": \"...\"}, ...])");
  ++in->p;
}

static int json_hex4(const char *p) {
  int v = 0;
  for (int i = 0; i < 4; ++i) {
    const char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else die("MESSAGES.json: bad \\u escape");
  }
  return v;
}

static char *json_string(struct json_in *in) {
  json_expect(in, '"');
  /* Decoding never lengthens: \\uXXXX (6 bytes) is at most 3 UTF-8 bytes,
   * a surrogate pair (12) is 4. */
  const char *end = in->p;
  while (*end && *end != '"') end += *end == '\\' && end[1] ? 2 : 1;
  char *out = xmalloc((size_t)(end - in->p) + 1), *o = out;
  while (*in->p != '"') {
    unsigned char c = (unsigned char)*in->p++;
    if (!c) die("MESSAGES.json: unterminated string");
    if (c != '\\') {
      *o++ = (char)c;
      continue;
    }
    c = (unsigned char)*in->p++;
    switch (c) {
      case '"': case '\\': case '/': *o++ = (char)c; break;
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case 'n': *o++ = '\n'; break;
      case 'r': *o++ = '\r'; break;
      case 't': *o++ = '\t'; break;
      case 'u': {
        long cp = json_hex4(in->p);
        in->p += 4;
        if (cp >= 0xd800 && cp < 0xdc00 && in->p[0] == '\\' && in->p[1] == 'u') {
          const int lo = json_hex4(in->p + 2);
          if (lo >= 0xdc00 && lo < 0xe000) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            in->p += 6;
          }
        }
        if (cp < 0x80) {
          *o++ = (char)cp;
        } else if (cp < 0x800) {
          *o++ = (char)(0xc0 | cp >> 6);
          *o++ = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
          *o++ = (char)(0xe0 | cp >> 12);
          *o++ = (char)(0x80 | (cp >> 6 & 0x3f));
          *o++ = (char)(0x80 | (cp & 0x3f));
        } else {
          *o++ = (char)(0xf0 | cp >> 18);
          *o++ = (char)(0x80 | (cp >> 12 & 0x3f));
          *o++ = (char)(0x80 | (cp >> 6 & 0x3f));
          *o++ = (char)(0x80 | (cp & 0x3f));
        }
        break;
      }
      default: die("MESSAGES.json: bad escape");
    }
  }
  ++in->p;
  *o = 0;
  return out;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) die("cannot open the messages file");
  size_t n = 0, cap = 4096;
  char *s = xmalloc(cap);
  for (size_t got; (got = fread(s + n, 1, cap - n - 1, f)) > 0;) {
    n += got;
    if (cap - n == 1) s = realloc(s, cap *= 2);
    if (!s) die("out of memory");
  }
  fclose(f);
  s[n] = 0;
  return s;
}

/* The messages, count in *n; the strings are never freed (the process ends). */
static struct llama_chat_message *read_messages(const char *path, size_t *n) {
  char *text = read_file(path);
  struct json_in in = {text};
  size_t cap = 8;
  struct llama_chat_message *msgs = xmalloc(sizeof *msgs * cap);
  *n = 0;
  json_expect(&in, '[');
  json_ws(&in);
  if (*in.p == ']') die("MESSAGES.json: no messages");
  for (;;) {
    struct llama_chat_message m = {NULL, NULL};
    json_expect(&in, '{');
    for (;;) {
      char *key = json_string(&in);
      json_expect(&in, ':');
      char *value = json_string(&in);
      if (strcmp(key, "role") == 0) m.role = value;
      else if (strcmp(key, "content") == 0) m.content = value;
      else die("MESSAGES.json: a message has only \"role\" and \"content\"");
      free(key);
      json_ws(&in);
      if (*in.p == '}') break;
      json_expect(&in, ',');
    }
    ++in.p;
    if (!m.role || !m.content) die("MESSAGES.json: a message without \"role\" or \"content\"");
    if (*n == cap) msgs = realloc(msgs, sizeof *msgs * (cap *= 2));
    if (!msgs) die("out of memory");
    msgs[(*n)++] = m;
    json_ws(&in);
    if (*in.p == ']') break;
    json_expect(&in, ',');
  }
  free(text);
  return msgs;
}

/* TYPE for quantize, or die. */
static enum llama_ftype quant_ftype(const char *name) {
  static const struct {
    const char *name;
    enum llama_ftype ftype;
  } types[] = {
      {"q4_k_m", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"q5_k_m", LLAMA_FTYPE_MOSTLY_Q5_K_M},
      {"q6_k", LLAMA_FTYPE_MOSTLY_Q6_K},     {"q4_k_s", LLAMA_FTYPE_MOSTLY_Q4_K_S},
      {"q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},     {"q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},
      {"q3_k_m", LLAMA_FTYPE_MOSTLY_Q3_K_M}, {"q2_k", LLAMA_FTYPE_MOSTLY_Q2_K},
      {"iq4_xs", LLAMA_FTYPE_MOSTLY_IQ4_XS}, {"iq4_nl", LLAMA_FTYPE_MOSTLY_IQ4_NL},
      {"q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},     {"q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
      {"q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
  };
  for (size_t i = 0; i < sizeof types / sizeof types[0]; ++i)
    if (strcmp(name, types[i].name) == 0) return types[i].ftype;
  die("unknown quantization type (want q4_k_m, q5_k_m, q6_k, q4_k_s, q8_0, q4_0, q3_k_m, q2_k, iq4_xs, iq4_nl, q5_0, "
      "q5_1 or q4_1)");
  return LLAMA_FTYPE_ALL_F32;
}

/* The p-th percentile of n sorted samples by nearest rank, as SplitSpec's
 * bench forward reports them (common/util/percentile.h). */
static double nearest_rank(const double *sorted, int n, int p) {
  int rank = (n * p + 99) / 100;
  if (rank < 1) rank = 1;
  return sorted[rank - 1];
}

/* The model's trained context, capped as SplitSpec caps its own (at
 * SPLITSPEC_MAX_CONTEXT, default 4096): a 128K-context model's full-size batch
 * buffers would not fit in memory, and LongRoPE's factors follow the context
 * (long past the original context length), in both programs alike. */
static int context_size(const struct llama_model *model) {
  const int n = llama_model_n_ctx_train(model);
  const char *env = getenv("SPLITSPEC_MAX_CONTEXT");
  const int cap = env && atoi(env) > 0 ? atoi(env) : 4096;
  return n < cap ? n : cap;
}

static struct llama_context *context(struct llama_model *model, int threads, int n_ctx) {
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n_ctx;
  cp.n_batch = n_ctx;
  cp.n_ubatch = n_ctx;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  /* LLAMACPP_BENCH_EXACT=1: an F32 KV cache and no flash attention, so that
   * the reference's rounding is as near ours as llama.cpp allows (tests
   * compare greedy tokens; an F16 cache flips near-ties). */
  if (getenv("LLAMACPP_BENCH_EXACT")) {
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  }
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

/* The prompt in one batch, then n_new argmax tokens into out; the two phases'
 * milliseconds into ms[0] and ms[1]. */
static void greedy(struct llama_context *ctx, struct llama_batch *b, const llama_token *prompt, int n_prompt, int n_new,
                   int n_vocab, llama_token *out, double ms[2]) {
  llama_memory_clear(llama_get_memory(ctx), 1);
  const double t0 = now_ms();
  decode(ctx, b, prompt, n_prompt, 0, 0);
  const double t1 = now_ms();
  int pos = n_prompt;
  for (int i = 0; i < n_new; ++i) {
    const float *logits = llama_get_logits_ith(ctx, -1);
    int best = 0;
    for (int v = 1; v < n_vocab; ++v)
      if (logits[v] > logits[best]) best = v;
    out[i] = best;
    if (i + 1 < n_new) decode(ctx, b, &out[i], 1, pos++, 0);
  }
  ms[0] = t1 - t0;
  ms[1] = now_ms() - t1;
}

int main(int argc, char **argv) {
  if (argc < 4)
    die("usage: llamacpp_bench BINS MODEL.gguf "
        "info|tokenize|tokenize-special|chat|greedy|greedy-file|greedy-text|forward|quantize ...");
  llama_log_set(quiet, NULL);
  ggml_backend_load_all_from_path(argv[1]);
  llama_backend_init();
  /* quantize reads IN.gguf itself: no model is loaded for it. */
  if (strcmp(argv[3], "quantize") == 0) {
    if (argc < 6) die("usage: llamacpp_bench BINS IN.gguf quantize OUT.gguf TYPE [THREADS]");
    struct llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.ftype = quant_ftype(argv[5]);
    qp.nthread = argc >= 7 ? atoi(argv[6]) : 0;
    const double t0 = now_ms();
    if (llama_model_quantize(argv[2], argv[4], &qp) != 0) die("llama_model_quantize failed");
    const double ms = now_ms() - t0;
    printf("{\"out\": ");
    print_json_string(argv[4], strlen(argv[4]));
    printf(", \"type\": \"%s\", \"ms\": %.3f}\n", argv[5], ms);
    return 0;
  }
  const long rss_before = status_kb("VmRSS:");
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  /* LLAMACPP_BENCH_NO_REPACK=1: K-quant and Q4_0 weights stay in the file's
   * layout instead of llama.cpp's repacked x86 GEMM/GEMV layouts, whose float
   * sums run in another order. */
  if (getenv("LLAMACPP_BENCH_NO_REPACK")) mp.use_extra_bufts = false;
  mp.vocab_only =
      strcmp(argv[3], "tokenize") == 0 || strcmp(argv[3], "tokenize-special") == 0 || strcmp(argv[3], "chat") == 0;
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
    int n;
    llama_token *ids = tokenize(vocab, argv[4], strlen(argv[4]), 1, 0, &n);
    printf("{\"ids\": ");
    print_ids(ids, n);
    printf("}\n");
    return 0;
  }
  if ((strcmp(cmd, "greedy") == 0 || strcmp(cmd, "greedy-file") == 0) && argc >= 7) {
    const int threads = atoi(argv[4]), n_new = atoi(argv[5]);
    const int n_ctx = context_size(model);
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
      double ms[2];
      greedy(ctx, &b, prompt, n_prompt, n_new, n_vocab, out, ms);
      printf("{\"index\": %d, \"output_ids\": [", index);
      for (int i = 0; i < n_new; ++i) printf("%s%d", i ? ", " : "", out[i]);
      printf("], \"prefill_ms\": %.4f, \"decode_ms\": %.4f, \"ms\": %.4f, \"ms_per_token\": %.5f, \"rss_kb\": %ld, "
             "\"peak_rss_kb\": %ld, \"rss_before_load_kb\": %ld, \"threads\": %d}\n",
             ms[0], ms[1], ms[0] + ms[1], (ms[0] + ms[1]) / n_new, status_kb("VmRSS:"), status_kb("VmHWM:"), rss_before,
             threads);
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
  if (strcmp(cmd, "logits") == 0 && argc >= 7) {
    /* Every position's logits of each sequence (one batch a sequence), into
     * OUT.bin as float32 rows; then each OTHER.bin of the same layout (another
     * engine's, or this one's on another path) against them, row by row: the
     * normalized mean squared error of test-backend-ops, sum((o - r)^2) /
     * sum(r^2), and whether the argmax agrees. A departure (another argmax)
     * to a token whose logit here is within twice file j's largest deviation
     * on that row of this path's maximum is a tie at file j's precision:
     * j's own error could flip it. Each file's departures past file j's
     * noise are counted per j, so a caller can tell a flipped near-tie from
     * a wrong choice. */
    const int threads = atoi(argv[4]);
    const int n_ctx = context_size(model);
    struct llama_context *ctx = context(model, threads, n_ctx);
    struct llama_batch b = llama_batch_init(n_ctx, 0, 1);
    FILE *in = fopen(argv[5], "r"), *out = fopen(argv[6], "wb");
    if (!in || !out) die("cannot open the ids file or the output");
    const int n_other = argc - 7;
    const size_t n_slots = (size_t)(n_other > 0 ? n_other : 1);
    FILE **other = xmalloc(sizeof(FILE *) * n_slots);
    for (int k = 0; k < n_other; ++k)
      if (!(other[k] = fopen(argv[7 + k], "rb"))) die("cannot open a logits file to compare");
    double *max_nmse = xmalloc(sizeof(double) * n_slots), *sum_nmse = xmalloc(sizeof(double) * n_slots);
    double *deviation = xmalloc(sizeof(double) * n_slots);
    long *agree = xmalloc(sizeof(long) * n_slots), *past_noise = xmalloc(sizeof(long) * n_slots * n_slots);
    int *choice = xmalloc(sizeof(int) * n_slots);
    for (int k = 0; k < n_other; ++k) max_nmse[k] = sum_nmse[k] = 0, agree[k] = 0;
    for (size_t k = 0; k < n_slots * n_slots; ++k) past_noise[k] = 0;
    float *row = xmalloc(sizeof(float) * (size_t)n_vocab);
    llama_token *ids = xmalloc(sizeof(llama_token) * (size_t)n_ctx);
    char *line = NULL;
    size_t cap = 0;
    long rows = 0;
    while (getline(&line, &cap, in) >= 0) {
      const int n = parse_ids(line, ids, n_ctx);
      if (n == 0) continue;
      if (n < 0) die("bad ids line (or longer than the context)");
      llama_memory_clear(llama_get_memory(ctx), 1);
      decode(ctx, &b, ids, n, 0, 1);
      for (int i = 0; i < n; ++i, ++rows) {
        const float *ref = llama_get_logits_ith(ctx, i);
        if (fwrite(ref, sizeof(float), (size_t)n_vocab, out) != (size_t)n_vocab) die("write failed");
        int best = 0;
        for (int v = 1; v < n_vocab; ++v)
          if (ref[v] > ref[best]) best = v;
        for (int k = 0; k < n_other; ++k) {
          if (fread(row, sizeof(float), (size_t)n_vocab, other[k]) != (size_t)n_vocab) die("a logits file to compare is short");
          double err = 0, norm = 0, dev = 0;
          int theirs = 0;
          for (int v = 0; v < n_vocab; ++v) {
            const double d = (double)row[v] - ref[v];
            err += d * d;
            norm += (double)ref[v] * ref[v];
            if (fabs(d) > dev) dev = fabs(d);
            if (row[v] > row[theirs]) theirs = v;
          }
          const double nmse = norm > 0 ? err / norm : err;
          /* LLAMACPP_BENCH_ROWS=1: each row's NMSE on stderr, to find where a
           * maximum comes from. */
          if (getenv("LLAMACPP_BENCH_ROWS"))
            fprintf(stderr, "row %ld file %d nmse %.6g norm %.6g argmax %d %d margin %.6g deviation %.6g\n", rows, k,
                    nmse, sqrt(norm / n_vocab), best, theirs, (double)ref[best] - ref[theirs], dev);
          sum_nmse[k] += nmse;
          if (nmse > max_nmse[k]) max_nmse[k] = nmse;
          agree[k] += theirs == best;
          deviation[k] = dev;
          choice[k] = theirs;
        }
        for (int k = 0; k < n_other; ++k)
          for (int j = 0; j < n_other; ++j)
            past_noise[k * n_other + j] += (double)ref[best] - ref[choice[k]] > 2 * deviation[j];
      }
    }
    if (fclose(out) != 0) die("write failed");
    printf("{\"rows\": %ld, \"vocab\": %d, \"compared\": [", rows, n_vocab);
    for (int k = 0; k < n_other; ++k) {
      int extra = fgetc(other[k]) != EOF;
      printf("%s{\"file\": ", k ? ", " : "");
      print_json_string(argv[7 + k], strlen(argv[7 + k]));
      printf(", \"max_nmse\": %.6g, \"mean_nmse\": %.6g, \"argmax_agree\": %ld, \"departures_past_noise_of\": [",
             max_nmse[k], rows ? sum_nmse[k] / rows : 0.0, agree[k]);
      for (int j = 0; j < n_other; ++j) printf("%s%ld", j ? ", " : "", past_noise[k * n_other + j]);
      printf("], \"trailing_data\": %s}", extra ? "true" : "false");
    }
    printf("]}\n");
    return 0;
  }
  if (strcmp(cmd, "tokenize-special") == 0 && argc >= 7) {
    int n;
    llama_token *ids = tokenize(vocab, argv[6], strlen(argv[6]), atoi(argv[4]), atoi(argv[5]), &n);
    printf("{\"ids\": ");
    print_ids(ids, n);
    printf("}\n");
    return 0;
  }
  if (strcmp(cmd, "chat") == 0 && argc >= 7) {
    const char *tmpl = argv[4];
    if (strcmp(tmpl, "model") == 0) {
      tmpl = llama_model_chat_template(model, NULL);
      if (!tmpl) die("the model has no tokenizer.chat_template");
    }
    size_t n_msg;
    const struct llama_chat_message *msgs = read_messages(argv[6], &n_msg);
    const int add_ass = atoi(argv[5]);
    int len = llama_chat_apply_template(tmpl, msgs, n_msg, add_ass, NULL, 0);
    if (len < 0) die("llama_chat_apply_template knows no such template");
    char *text = xmalloc((size_t)len + 1);
    llama_chat_apply_template(tmpl, msgs, n_msg, add_ass, text, len + 1);
    int n;
    llama_token *ids = tokenize(vocab, text, (size_t)len, 1, 1, &n);
    printf("{\"text\": ");
    print_json_string(text, (size_t)len);
    printf(", \"ids\": ");
    print_ids(ids, n);
    printf("}\n");
    return 0;
  }
  if (strcmp(cmd, "greedy-text") == 0 && argc >= 7) {
    const int threads = atoi(argv[4]), n_new = atoi(argv[5]);
    const int n_ctx = context_size(model);
    int n_prompt;
    llama_token *prompt = tokenize(vocab, argv[6], strlen(argv[6]), 1, 1, &n_prompt);
    if (n_prompt <= 0) die("the prompt has no tokens");
    if (n_prompt + n_new > n_ctx) die("prompt and new tokens exceed the context");
    struct llama_context *ctx = context(model, threads, n_ctx);
    struct llama_batch b = llama_batch_init(n_ctx, 0, 1);
    llama_token *out = xmalloc(sizeof(llama_token) * (size_t)(n_new > 0 ? n_new : 1));
    double ms[2];
    greedy(ctx, &b, prompt, n_prompt, n_new, n_vocab, out, ms);
    printf("{\"prompt_ids\": ");
    print_ids(prompt, n_prompt);
    printf(", \"ids\": ");
    print_ids(out, n_new);
    printf("}\n");
    return 0;
  }
  if ((strcmp(cmd, "forward") == 0 || strcmp(cmd, "prefill") == 0) && argc >= 8) {
    const int all_logits = strcmp(cmd, "forward") == 0;
    const int threads = atoi(argv[4]), ctx_len = atoi(argv[5]);
    const double min_ms = atof(argv[7]) * 1e3;
    /* As SplitSpec's bench forward: untimed rounds, then at least this many timed. */
    const int warmup = argc >= 10 ? atoi(argv[8]) : 2, min_samples = argc >= 10 ? atoi(argv[9]) : 5;
    llama_token ks[16];
    const int n_k = parse_ids(argv[6], ks, 16);
    if (n_k <= 0) die("bad k list");
    int max_k = 0;
    for (int i = 0; i < n_k; ++i) max_k = ks[i] > max_k ? ks[i] : max_k;
    const int n_ctx = context_size(model);
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
    if (ctx_len > 0) decode(ctx, &b, ids, ctx_len, 0, 0);
    llama_memory_t mem = llama_get_memory(ctx);
    double *samples[16];
    int counts[16] = {0};
    const int cap = 100000;
    for (int i = 0; i < n_k; ++i) samples[i] = malloc(sizeof(double) * cap);
    const double start = now_ms();
    for (int round = 0; round < warmup + min_samples || now_ms() - start < min_ms * n_k; ++round) {
      for (int i = 0; i < n_k; ++i) {
        const double t = now_ms();
        decode(ctx, &b, ids + ctx_len, ks[i], ctx_len, all_logits);
        const double ms = now_ms() - t;
        llama_memory_seq_rm(mem, 0, ctx_len, -1);
        if (round >= warmup && counts[i] < cap) samples[i][counts[i]++] = ms;
      }
      if (round > cap) break;
    }
    printf("{\"rows\": [");
    for (int i = 0; i < n_k; ++i) {
      qsort(samples[i], counts[i], sizeof(double), cmp_double);
      printf("%s{\"context\": %d, \"new_tokens\": %d, \"ms\": %.5f, \"ms_p90\": %.5f, \"ms_p99\": %.5f, "
             "\"samples\": %d}",
             i ? ", " : "", ctx_len, ks[i], nearest_rank(samples[i], counts[i], 50), nearest_rank(samples[i], counts[i], 90),
             nearest_rank(samples[i], counts[i], 99), counts[i]);
    }
    printf("], \"rss_kb\": %ld, \"peak_rss_kb\": %ld, \"threads\": %d}\n", status_kb("VmRSS:"), status_kb("VmHWM:"),
           threads);
    return 0;
  }
  die("unknown command or missing arguments");
  return 1;
}

// The CUDA backend on a GPU: its quantized products are the CPU reference's
// bits at every row count, its float products batch-invariant, its forward
// bitwise the same for a k-row verification and k steps, a batch and each
// alone, a tree and its chain, a chunked prefill and one prefill, at every
// weight type it runs and both KV types; its taps arrive while the forward
// runs; memory running out refuses a store and nothing else. Where no GPU is
// present every test but the refusals of what it does not run skips,
// saying so (scripts/gpu_check.sh runs them on one).
#include "common/backend/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include "common/decoding/target_decoder.h"
#include "common/decoding/token_tree.h"
#include "common/kernels/linear.h"
#include "common/kernels/quant.h"
#include "common/util/error.h"

namespace splitspec {
namespace {

namespace fs = std::filesystem;

// Under the CPU emulator of CUDA (tests/backend/cuda_emulator) the same
// tests run smaller: every GPU thread is a fiber there.
#if defined(SPLITSPEC_CUDA_EMULATE)
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

bool gpu_here() { return cuda::status().devices > 0; }
#define SKIP_WITHOUT_GPU()                                                                      \
  do {                                                                                          \
    if (!gpu_here()) GTEST_SKIP() << "no GPU here (" << cuda::status().error << "): scripts/gpu_check.sh runs it on one"; \
  } while (0)

std::vector<float> normals(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

double nmse(const float* got, const float* want, size_t n) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    err += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm > 0 ? err / norm : err;
}

// A directory holding a random model stored at `type` (the K-quants as our
// quantizer's Q4_K_M and Q6_K mixes), removed at scope exit.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct ModelDir {
  fs::path dir;
  explicit ModelDir(const ModelConfig& c, WType type, uint64_t seed) {
    dir = fs::temp_directory_path() / ("splitspec-gpu-" + std::to_string(::getpid()) + "-" + wtype_name(type) + "-" +
                                       std::to_string(seed));
    Model::random(c, seed, WType::F32, 0.08f)->save(dir.string(), type);
  }
  ~ModelDir() { fs::remove_all(dir); }
};

ModelConfig gpu_config() {
  ModelConfig c;
  c.hidden_size = 256;  // whole K-quant super-blocks
  c.intermediate_size = 768;
  c.num_hidden_layers = kEmulated ? 2 : 3;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.vocab_size = kEmulated ? 300 : 700;  // not a multiple of any tile
  c.max_position_embeddings = 512;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  return c;
}

// ---- Products -------------------------------------------------------------

TEST(GpuLinear, QuantizedProductsAreTheCpuReferenceAtEveryRowCount) {
  SKIP_WITHOUT_GPU();
  for (WType t : {WType::Q8_0, WType::Q4_K, WType::Q6_K}) {
    // Output rows that fill no whole warp or tile, and widths of one and of
    // several blocks.
    for (int64_t cols : {256, 1280}) {
      const int64_t rows = kEmulated ? 37 : 203;
      const std::vector<float> w = normals(static_cast<size_t>(rows * cols), 3 + cols, 0.05f);
      std::vector<uint8_t> stored(static_cast<size_t>(rows * row_bytes(t, cols)));
      quantize_rows(t, w.data(), rows, cols, stored.data());
      const MatrixRef m{t, stored.data(), rows, cols, false};
      for (int64_t n = 1; n <= 64; n += kEmulated && n > 9 ? 8 : 1) {
        const std::vector<float> x = normals(static_cast<size_t>(n * cols), 100 + n, 1.5f);
        std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size());
        kernels::linear_reference(x.data(), n, m, want.data());
        cuda::linear(m, x.data(), n, got.data());
        ASSERT_TRUE(same_bits(got.data(), want.data(), want.size()))
            << wtype_name(t) << " cols " << cols << " rows " << n << ": first difference at "
            << (std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin());
      }
    }
  }
}

TEST(GpuLinear, FloatProductsAreBatchInvariantAndNearTheCpu) {
  SKIP_WITHOUT_GPU();
  for (WType t : {WType::BF16, WType::F16, WType::F32}) {
    const int64_t rows = 150, cols = 1100;  // neither a multiple of 16 nor of the 512-column chunk
    const std::vector<float> w = normals(static_cast<size_t>(rows * cols), 8, 0.05f);
    std::vector<uint8_t> stored(static_cast<size_t>(rows * row_bytes(t, cols)));
    quantize_rows(t, w.data(), rows, cols, stored.data());
    const MatrixRef m{t, stored.data(), rows, cols, false};
    const int64_t most = 80;
    const std::vector<float> x = normals(static_cast<size_t>(most * cols), 9, 1.0f);
    std::vector<float> all(static_cast<size_t>(most * rows)), want(all.size());
    cuda::linear(m, x.data(), most, all.data());
    kernels::linear_reference(x.data(), most, m, want.data());
    EXPECT_LT(nmse(all.data(), want.data(), all.size()), t == WType::F32 ? 1e-10 : 1e-4) << wtype_name(t);
    for (int64_t n : {1, 2, 7, 8, 9, 17, 33, 64}) {
      std::vector<float> part(static_cast<size_t>(n * rows));
      // Rows 3 .. 3 + n of the input, alone.
      cuda::linear(m, x.data() + 3 * cols, n, part.data());
      ASSERT_TRUE(same_bits(part.data(), all.data() + 3 * rows, part.size())) << wtype_name(t) << " n " << n;
    }
  }
}

// ---- Whole forwards -------------------------------------------------------

ForwardResult run(const Backend& b, KVStore& kv, const ForwardRequest& r) { return std::move(b.forward_batch({{&r, &kv}})[0]); }

class GpuForward : public ::testing::TestWithParam<std::tuple<WType, KVType>> {};

TEST_P(GpuForward, VerificationsBatchesTreesAndChunksEqualSingleSteps) {
  SKIP_WITHOUT_GPU();
  const auto [type, kv] = GetParam();
  const ModelConfig c = gpu_config();
  const ModelDir dir(c, type, 41);
  BackendOptions o;
  o.device = parse_device("cuda");
  o.kv_type = kv;
  const std::shared_ptr<Backend> b = cuda::open(dir.dir.string(), o);
  EXPECT_EQ(b->numerics().backend, "cuda");
  EXPECT_EQ(b->numerics().weights_digest, Model::load(dir.dir.string())->weights_digest());
  const std::vector<int32_t> seq = {1, 9, 4, 33, 21, 7, 40, 2, 15, 16, 200, 291};
  const int64_t V = c.vocab_size;

  // One step at a time.
  const auto step = b->new_kv(64);
  std::vector<float> stepwise;
  ForwardRequest r;
  r.tokens = {seq[0], seq[1], seq[2]};
  const ForwardResult first = run(*b, *step, r);
  stepwise.insert(stepwise.end(), first.logits.data(), first.logits.data() + first.logits.size());
  for (size_t i = 3; i < seq.size(); ++i) {
    r.tokens = {seq[i]};
    const ForwardResult o1 = run(*b, *step, r);
    stepwise.insert(stepwise.end(), o1.logits.data(), o1.logits.data() + V);
  }
  const int64_t rest = static_cast<int64_t>(seq.size()) - 3;

  // The continuation as one verification.
  const auto chain = b->new_kv(64);
  r.tokens = {seq[0], seq[1], seq[2]};
  run(*b, *chain, r);
  r.tokens.assign(seq.begin() + 3, seq.end());
  const ForwardResult ch = run(*b, *chain, r);
  EXPECT_TRUE(same_bits(ch.logits.data(), stepwise.data() + 3 * V, static_cast<size_t>(rest * V))) << "chain vs steps";

  // As a branch of a tree behind a decoy branch.
  const auto tree = b->new_kv(64);
  r.tokens = {seq[0], seq[1], seq[2]};
  run(*b, *tree, r);
  DraftTree t;
  t.tokens = {5, 6, 7};
  t.parents = {-1, 0, 1};
  for (size_t i = 3; i < seq.size(); ++i) {
    t.tokens.push_back(seq[i]);
    t.parents.push_back(i == 3 ? -1 : static_cast<int32_t>(t.tokens.size()) - 2);
  }
  ForwardRequest tr;
  tr.tokens = t.tokens;
  for (int d : t.depths()) tr.positions.push_back(3 + d - 1);
  tr.mask = tree_attention_mask(t.parents, 3);
  const ForwardResult tl = run(*b, *tree, tr);
  EXPECT_TRUE(same_bits(tl.logits.data() + 3 * V, stepwise.data() + 3 * V, static_cast<size_t>(rest * V)))
      << "tree branch vs steps";
  // Its accepted path kept, the next step is the chain's.
  std::vector<int64_t> path;
  for (int64_t i = 3; i < static_cast<int64_t>(t.tokens.size()); ++i) path.push_back(i);
  tree->keep(3, path);
  r.tokens = {17};
  const auto after_chain = run(*b, *chain, r), after_tree = run(*b, *tree, r);
  EXPECT_TRUE(same_bits(after_tree.logits.data(), after_chain.logits.data(), V)) << "after keeping the path";

  // A batch: the same verification beside two other sequences.
  const auto x1 = b->new_kv(64), x2 = b->new_kv(8), x3 = b->new_kv(64);
  r.tokens = {seq[0], seq[1], seq[2]};
  run(*b, *x1, r);
  ForwardRequest v1, v2, v3;
  v1.tokens.assign(seq.begin() + 3, seq.end());
  v2.tokens = {1, 2, 3, 4, 5};
  v3.tokens = {8, 8, 8};
  v3.logits_rows = std::vector<int64_t>{2};
  const std::vector<ForwardResult> batch = b->forward_batch({{&v2, x2.get()}, {&v1, x1.get()}, {&v3, x3.get()}});
  EXPECT_TRUE(same_bits(batch[1].logits.data(), stepwise.data() + 3 * V, static_cast<size_t>(rest * V))) << "batch";
  const auto alone = b->new_kv(8);
  EXPECT_TRUE(same_bits(run(*b, *alone, v2).logits.data(), batch[0].logits.data(), static_cast<size_t>(5 * V)));

  // A prefill in chunks, then a step: one prefill's.
  std::vector<int32_t> prompt;
  for (int i = 0; i < (kEmulated ? 70 : 150); ++i) prompt.push_back(3 + (i * 37) % 290);
  const auto whole = b->new_kv(256), chunked = b->new_kv(256);
  r.tokens = prompt;
  r.logits_rows = std::vector<int64_t>{};
  run(*b, *whole, r);
  for (size_t at = 0; at < prompt.size(); at += 32) {
    r.tokens.assign(prompt.begin() + at, prompt.begin() + std::min(prompt.size(), at + 32));
    run(*b, *chunked, r);
  }
  r.logits_rows.reset();
  r.tokens = {42};
  EXPECT_TRUE(same_bits(run(*b, *whole, r).logits.data(), run(*b, *chunked, r).logits.data(), V)) << "chunked prefill";
  // Reserving more keeps the entries.
  whole->reserve(400);
  chunked->reserve(300);
  r.tokens = {43};
  EXPECT_TRUE(same_bits(run(*b, *whole, r).logits.data(), run(*b, *chunked, r).logits.data(), V)) << "after reserve";
}

INSTANTIATE_TEST_SUITE_P(EveryType, GpuForward,
                         ::testing::Combine(::testing::Values(WType::F32, WType::F16, WType::BF16, WType::Q8_0,
                                                              WType::Q4_K, WType::Q6_K),
                                            ::testing::Values(KVType::F32, KVType::F16)),
                         [](const auto& info) {
                           return std::string(wtype_name(std::get<0>(info.param))) + "_kv" +
                                  kv_type_name(std::get<1>(info.param));
                         });

// Greedy decoding with drafted trees, the rounds answered by argmax on the
// device, commits what one token at a time commits; and the GPU's logits are
// near the CPU's.
TEST(GpuDecoding, TreeRoundsCommitWhatStepsCommitAndLogitsAreNearTheCpus) {
  SKIP_WITHOUT_GPU();
  const ModelConfig c = gpu_config();
  const ModelDir dir(c, WType::Q4_K, 5);
  const std::shared_ptr<Backend> gpu = cuda::open(dir.dir.string(), {parse_device("cuda"), KVType::F32, {}});
  GenerateOptions o;
  o.max_new_tokens = kEmulated ? 16 : 40;
  o.ignore_eos = true;
  const std::vector<int32_t> prompt = {1, 45, 200, 7};
  TargetDecoder steps(*gpu, prompt, o), rounds(*gpu, prompt, o);
  while (!steps.finished()) steps.step();
  for (int i = 0; !rounds.finished(); ++i) {
    // Drafts that match the target's next tokens in part.
    const std::vector<int32_t>& want = steps.sequence();
    const size_t at = rounds.sequence().size();
    DraftTree t;
    if (at < want.size()) t.tokens.push_back(want[at]);
    if (at + 1 < want.size()) t.tokens.push_back(i % 2 ? want[at + 1] : 3);
    t.tokens.push_back(9);
    t.parents = {-1};
    for (size_t k = 1; k < t.tokens.size(); ++k) t.parents.push_back(k == t.tokens.size() - 1 ? -1 : 0);
    if (static_cast<int32_t>(t.tokens.size()) > rounds.room()) t = DraftTree{};
    rounds.verify(t);
  }
  EXPECT_EQ(rounds.sequence(), steps.sequence());

  const auto cpu = Model::load(dir.dir.string());
  ForwardRequest r;
  r.tokens = {1, 45, 200, 7, 8, 9};
  KVCache cache = cpu->new_cache(16);
  const ForwardResult want = cpu->forward(r, cache);
  const auto kv = gpu->new_kv(16);
  const ForwardResult got = run(*gpu, *kv, r);
  EXPECT_LT(nmse(got.logits.data(), want.logits.data(), static_cast<size_t>(want.logits.size())), 5e-4);
}

// The taps' rows reach on_layer while later layers still run, on another
// thread, and are the rows hidden_layers returns.
TEST(GpuTaps, RowsArriveDuringTheForward) {
  SKIP_WITHOUT_GPU();
  ModelConfig c = gpu_config();
  c.num_hidden_layers = 8;
  const ModelDir dir(c, WType::BF16, 6);
  const std::shared_ptr<Backend> b = cuda::open(dir.dir.string(), {parse_device("cuda"), KVType::F16, {}});
  ForwardRequest r;
  r.tokens = {1, 5, 6, 7};
  r.hidden_layers = {1, 5};
  std::vector<std::pair<int64_t, Rows>> seen;
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> other_thread{false};
  r.tap_layers = {1, 5};
  r.on_layer = [&](int64_t layer, RowsView rows) {
    seen.emplace_back(layer, Rows::copy_of(rows));
    other_thread = other_thread || std::this_thread::get_id() != caller;
  };
  const auto kv = b->new_kv(16);
  const ForwardResult out = run(*b, *kv, r);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].first, 1);
  EXPECT_EQ(seen[1].first, 5);
  EXPECT_TRUE(other_thread);
  for (const auto& [layer, rows] : seen)
    EXPECT_TRUE(same_bits(rows.data(), out.hidden.at(layer).data(), static_cast<size_t>(rows.size())));
}

TEST(GpuMemory, StoresPastTheGpusMemoryAreRefusedAndTheGpuGoesOn) {
  SKIP_WITHOUT_GPU();
  ModelConfig c = gpu_config();
  c.max_position_embeddings = 65536;
  c.num_key_value_heads = 8;
  const ModelDir dir(c, WType::Q8_0, 7);
  setenv("SPLITSPEC_MAX_CONTEXT", "65536", 1);
  const std::shared_ptr<Backend> b = cuda::open(dir.dir.string(), {parse_device("cuda"), KVType::F32, {}});
  unsetenv("SPLITSPEC_MAX_CONTEXT");
  // Stores of the whole context (about 400 MB each) until the GPU has no
  // room for one more: that one is refused, with the reason.
  std::vector<std::unique_ptr<KVStore>> held;
  std::string refused;
  for (int i = 0; i < 2000 && refused.empty(); ++i) {
    try {
      held.push_back(b->new_kv(c.max_position_embeddings));
    } catch (const Error& e) {
      refused = e.what();
    }
  }
  EXPECT_NE(refused.find("out of device memory"), std::string::npos) << refused << " after " << held.size();
  EXPECT_EQ(b->fatal_error(), "");
  held.clear();
  const auto kv = b->new_kv(8);
  ForwardRequest r;
  r.tokens = {1, 2};
  EXPECT_EQ(run(*b, *kv, r).logits.rows(), 2);
}

// Targets made on the GPU for benchmarks (random values, our quantizer's
// Q4_K_M mix or BF16): they run, batch-invariant like any other.
TEST(GpuRandom, TargetsMadeOnTheGpuRunAndAreBatchInvariant) {
  SKIP_WITHOUT_GPU();
  ModelConfig c = gpu_config();
  c.num_hidden_layers = 2;
  for (WType t : {WType::Q4_K, WType::BF16}) {
    const std::shared_ptr<Backend> b = cuda::random(c, t, 3, 0.05f, {parse_device("cuda"), KVType::F16, {}});
    EXPECT_EQ(b->weight_type(), t);
    EXPECT_GT(b->weight_bytes(), 0u);
    ForwardRequest r;
    r.tokens = {1, 2, 3, 4};
    const auto all = b->new_kv(8);
    const ForwardResult out = run(*b, *all, r);
    for (int64_t i = 0; i < out.logits.size(); ++i) ASSERT_TRUE(std::isfinite(out.logits.data()[i])) << i;
    const auto steps = b->new_kv(8);
    for (int i = 0; i < 4; ++i) {
      ForwardRequest one;
      one.tokens = {r.tokens[i]};
      EXPECT_TRUE(same_bits(run(*b, *steps, one).logits.data(), out.logits.row(i), c.vocab_size)) << wtype_name(t) << " " << i;
    }
  }
}

// Forwards without taps run as CUDA graphs of their shape, captured once and
// replayed: the same bits as launching the kernels one by one, across new
// shapes, contexts that cross a span of attention, and buffers that grow.
TEST(GpuGraphs, ReplayedForwardsGiveTheLaunchedOnesBits) {
  SKIP_WITHOUT_GPU();
  const ModelConfig c = gpu_config();
  const ModelDir dir(c, WType::Q4_K, 12);
  setenv("SPLITSPEC_CUDA_GRAPHS", "0", 1);
  const std::shared_ptr<Backend> launched = cuda::open(dir.dir.string(), {parse_device("cuda"), KVType::F16, {}});
  unsetenv("SPLITSPEC_CUDA_GRAPHS");
  const std::shared_ptr<Backend> graphed = cuda::open(dir.dir.string(), {parse_device("cuda"), KVType::F16, {}});
  const auto ka = launched->new_kv(256), kb = graphed->new_kv(256);
  ForwardRequest r;
  for (int i = 0; i < 120; ++i) r.tokens.push_back(3 + (i * 13) % 280);
  r.logits_rows = std::vector<int64_t>{};
  run(*launched, *ka, r);
  run(*graphed, *kb, r);
  r.logits_rows.reset();
  for (int step = 0; step < (kEmulated ? 14 : 30); ++step) {
    // Decode steps, and now and then a 3-row verification that asks argmax alone.
    r.tokens.assign(step % 5 == 4 ? 3 : 1, static_cast<int32_t>(7 + step));
    r.argmax_only = step % 5 == 4;
    const ForwardResult a = run(*launched, *ka, r), b = run(*graphed, *kb, r);
    if (r.argmax_only)
      EXPECT_EQ(a.argmax, b.argmax) << step;
    else
      ASSERT_TRUE(same_bits(a.logits.data(), b.logits.data(), static_cast<size_t>(a.logits.size()))) << step;
  }
}

// A model of a type the GPU does not run is refused before any GPU is
// asked for, naming what it runs (so this runs everywhere).
TEST(CudaOpen, RefusesTypesItDoesNotRunNamingThem) {
  const ModelDir dir(gpu_config(), WType::Q4_0, 9);
  try {
    cuda::open(dir.dir.string(), {parse_device("cuda"), KVType::F32, {}});
    FAIL() << "q4_0 opened on the GPU";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("is q4_0"), std::string::npos) << m;
    EXPECT_NE(m.find("q4_k and q6_k"), std::string::npos) << m;
  }
  const std::string e = [&] {
    try {
      cuda::open(dir.dir.string() + "-missing", {parse_device("cuda"), KVType::F32, {}});
    } catch (const Error& x) {
      return std::string(x.what());
    }
    return std::string();
  }();
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
  // The fallback types of llama.cpp's quantizer, which the CPU reads.
  for (WType t : {WType::Q4_1, WType::Q5_0, WType::Q5_1, WType::IQ4_NL, WType::Q3_K, WType::Q2_K}) {
    const ModelDir typed(gpu_config(), t, 11);
    const std::string m = error_of([&] { cuda::open(typed.dir.string(), {parse_device("cuda"), KVType::F32, {}}); });
    EXPECT_NE(m.find(std::string("is ") + wtype_name(t) + "; the GPU runs"), std::string::npos) << m;
  }
}

// The families and options the GPU's forward does not compute yet are
// refused by name at load, never run as another function.
TEST(CudaOpen, RefusesFamiliesItDoesNotRunNamingThem) {
  ModelConfig gemma = gpu_config();
  gemma.architecture = "gemma3";
  gemma.activation = Activation::kGeluTanh;
  gemma.post_norms = gemma.scale_embeddings = true;
  gemma.sliding_window = 8;
  gemma.sliding_window_pattern = 2;
  ModelConfig partial = gpu_config();
  partial.architecture = "phi3";
  partial.rotary_dim = partial.head_dim / 2;
  for (const auto& [c, want] : {std::pair{gemma, std::string("the gemma3 family")},
                                std::pair{partial, std::string("partial rotary embeddings")}}) {
    const ModelDir dir(c, WType::F16, 12);
    const std::string m = error_of([&] { cuda::open(dir.dir.string(), {parse_device("cuda"), KVType::F32, {}}); });
    EXPECT_NE(m.find(want), std::string::npos) << m;
    EXPECT_NE(m.find("--device cpu"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace splitspec

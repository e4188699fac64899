// The backend seam on the CPU: the CPU backend is the engine bit for bit,
// its KV stores are the engine's caches, a decoder over a backend that
// answers greedy rounds with argmax alone (as a GPU does) commits what one
// answering with logits commits, and devices and numerics are named.
#include "common/backend/cpu_backend.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "common/backend/registry.h"
#include "common/decoding/sampling.h"
#include "common/decoding/target_decoder.h"
#include "common/util/error.h"
#include "common/convert/gguf_convert.h"

namespace splitspec {
namespace {

ModelConfig small_config(int64_t vocab = 48, int64_t layers = 3) {
  ModelConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.vocab_size = vocab;
  c.max_position_embeddings = 64;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  return c;
}

bool same(const Rows& a, const Rows& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.size()) * sizeof(float)) == 0;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CpuBackend, ForwardsAreTheEnginesBitForBit) {
  const auto m = Model::random(small_config(), 11, WType::Q8_0, 0.3f);
  const CpuBackend backend(m);
  ForwardRequest a, b;
  a.tokens = {1, 5, 9, 4};
  a.hidden_layers = {1};
  a.final_hidden = true;
  b.tokens = {3, 7};
  b.logits_rows = std::vector<int64_t>{1};
  KVCache ca = m->new_cache(32), cb = m->new_cache(32);
  const ForwardResult want_a = m->forward(a, ca), want_b = m->forward(b, cb);

  const auto ka = backend.new_kv(32), kb = backend.new_kv(32);
  const std::vector<ForwardResult> got = backend.forward_batch({{&a, ka.get()}, {&b, kb.get()}});
  EXPECT_TRUE(same(got[0].logits, want_a.logits));
  EXPECT_TRUE(same(got[0].hidden.at(1), want_a.hidden.at(1)));
  EXPECT_TRUE(same(got[0].final_hidden, want_a.final_hidden));
  EXPECT_TRUE(same(got[1].logits, want_b.logits));
  EXPECT_EQ(ka->size(), 4);
  EXPECT_EQ(kb->size(), 2);
  EXPECT_EQ(ka->bytes(), ca.bytes());
  EXPECT_EQ(backend.kv_bytes_per_position(), KVCache::bytes_per_position(m->config(), KVType::F32));

  // The store's edits are the cache's: keep a path, then one more step.
  ka->keep(2, {1});
  ca.keep(2, {1});
  ka->reserve(40);
  ca.reserve(40);
  EXPECT_EQ(ka->capacity(), 40);
  ForwardRequest next;
  next.tokens = {6};
  EXPECT_TRUE(same(backend.forward_batch({{&next, ka.get()}})[0].logits, m->forward(next, ca).logits));
  ka->truncate(1);
  EXPECT_EQ(ka->size(), 1);
}

// A store some other backend made is refused, naming why; so is a tap layer
// the model does not have.
TEST(CpuBackend, RefusesForeignStoresAndMissingLayers) {
  class OtherKV final : public KVStore {
   public:
    int64_t size() const override { return 0; }
    int64_t capacity() const override { return 8; }
    void reserve(int64_t) override {}
    void truncate(int64_t) override {}
    void keep(int64_t, const std::vector<int64_t>&) override {}
    size_t bytes() const override { return 0; }
  } other;
  const CpuBackend backend(Model::random(small_config(), 3));
  ForwardRequest r;
  r.tokens = {1};
  EXPECT_NE(error_of([&] { backend.forward_batch({{&r, &other}}); }).find("another backend"), std::string::npos);
  r.tap_layers = {3};
  r.on_layer = [](int64_t, RowsView) {};
  const auto kv = backend.new_kv(8);
  EXPECT_NE(error_of([&] { backend.forward_batch({{&r, kv.get()}}); }).find("tap layer 3"), std::string::npos);
  EXPECT_EQ(kv->size(), 0);
}

TEST(CpuBackend, OnLayerRunsAtTheTapLayersOnly) {
  const CpuBackend backend(Model::random(small_config(48, 4), 3));
  std::vector<int64_t> seen;
  ForwardRequest r;
  r.tokens = {1, 2};
  r.on_layer = [&](int64_t layer, RowsView rows) {
    EXPECT_EQ(rows.rows, 2);
    seen.push_back(layer);
  };
  r.tap_layers = {0, 2};
  const auto kv = backend.new_kv(8);
  backend.forward_batch({{&r, kv.get()}});
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 2}));
  seen.clear();
  r.tap_layers.clear();
  const auto kv2 = backend.new_kv(8);
  backend.forward_batch({{&r, kv2.get()}});
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3})) << "no tap layers: every layer";
}

// What a GPU backend does with a greedy round: the argmax of each logits row
// (the first maximum) and no logits. Built on the CPU's forward.
class ArgmaxOnly final : public Backend {
 public:
  explicit ArgmaxOnly(const CpuBackend& cpu) : cpu_(cpu) {}
  const ModelConfig& config() const override { return cpu_.config(); }
  const std::string& name() const override { return cpu_.name(); }
  Numerics numerics() const override { return cpu_.numerics(); }
  std::string device() const override { return "argmax-only"; }
  WType weight_type() const override { return cpu_.weight_type(); }
  KVType kv_type() const override { return cpu_.kv_type(); }
  size_t weight_bytes() const override { return cpu_.weight_bytes(); }
  std::unique_ptr<KVStore> new_kv(int64_t capacity) const override { return cpu_.new_kv(capacity); }
  size_t kv_bytes_per_position() const override { return cpu_.kv_bytes_per_position(); }
  std::vector<ForwardResult> forward_batch(const std::vector<Item>& items) const override {
    std::vector<ForwardResult> out = cpu_.forward_batch(items);
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].request->argmax_only) continue;
      ++argmax_answers;
      for (int64_t r = 0; r < out[i].logits.rows(); ++r)
        out[i].argmax.push_back(greedy_token(out[i].logits.row(r), out[i].logits.cols()));
      out[i].logits = Rows();
    }
    return out;
  }
  const float* final_norm() const override { return cpu_.final_norm(); }
  Rows head_rows(const std::vector<int64_t>& ids) const override { return cpu_.head_rows(ids); }
  Rows head_logits(RowsView hidden) const override { return cpu_.head_logits(hidden); }
  mutable int argmax_answers = 0;

 private:
  const CpuBackend& cpu_;
};

TEST(TargetDecoderOverBackends, GreedyRoundsFromArgmaxAloneCommitWhatLogitsCommit) {
  const CpuBackend cpu(Model::random(small_config(40, 2), 5, WType::F32, 0.4f));
  const ArgmaxOnly gpu_like(cpu);
  GenerateOptions o;
  o.max_new_tokens = 20;
  o.ignore_eos = true;
  TargetDecoder a(cpu, {1, 7, 3}, o), b(gpu_like, {1, 7, 3}, o);
  for (int round = 0; !a.finished(); ++round) {
    // Trees that match the target now and then: the last verdict's token
    // repeated, and a branch.
    DraftTree tree;
    if (round % 3 != 0) {
      const int32_t last = a.sequence().back();
      tree.tokens = {last, static_cast<int32_t>((last + 1) % 40), last};
      tree.parents = {-1, -1, 0};
    }
    const RoundResult ra = a.verify(tree), rb = b.verify(tree);
    EXPECT_EQ(ra.verdict.tokens, rb.verdict.tokens) << round;
    EXPECT_EQ(ra.verdict.path, rb.verdict.path) << round;
  }
  EXPECT_EQ(a.sequence(), b.sequence());
  EXPECT_GT(gpu_like.argmax_answers, 0);

  // Rounds that need the logits (top-K extras, sampling) never ask argmax alone.
  gpu_like.argmax_answers = 0;
  TargetDecoder c(gpu_like, {1, 7, 3}, o);
  TargetDecoder::RoundRequest with_top_k;
  with_top_k.extras.top_k = 3;
  EXPECT_EQ(c.verify(DraftTree{}, with_top_k).extras.top_k.size(), 1u);
  GenerateOptions sampled = o;
  sampled.sampling.temperature = 0.8f;
  TargetDecoder d(gpu_like, {1, 7, 3}, sampled);
  d.step();
  EXPECT_EQ(gpu_like.argmax_answers, 0);
}

TEST(Numerics, NameTheCpuAndTheirDifferences) {
  const auto m = Model::random(small_config(), 3, WType::Q4_0);
  m->set_kv_type(KVType::F16);
  const CpuBackend backend(m);
  const Numerics n = backend.numerics();
  EXPECT_EQ(n.backend, "cpu");
  EXPECT_EQ(n.arch, cpu_arch());
  EXPECT_EQ(n.kernels, kCpuKernelsVersion);
  EXPECT_EQ(n.weight_type, "q4_0");
  EXPECT_EQ(n.weights_digest, m->weights_digest());
  EXPECT_EQ(n.kv_type, "f16");
  EXPECT_EQ(n.differences(n), "");
  EXPECT_NE(backend.device().find("cpu ("), std::string::npos);

  Numerics gpu = n;
  gpu.backend = "cuda";
  gpu.arch = "sm_90";
  EXPECT_EQ(n.differences(gpu), "backend cpu vs cuda, arch " + n.arch + " vs sm_90");
  Numerics unknown = n;
  unknown.weights_digest.clear();
  EXPECT_EQ(n.differences(unknown), "") << "an unknown digest is not another one";
  Numerics old = n;
  old.kv_type.clear();
  EXPECT_EQ(n.differences(old), "kv cache f16 vs f32") << "no kv type: a server before it, f32";
  EXPECT_NE(n.summary().find("cpu " + n.arch + " kernels " + kCpuKernelsVersion), std::string::npos);
}

TEST(Devices, ParseAndOpen) {
  EXPECT_EQ(parse_device("cpu").str(), "cpu");
  EXPECT_EQ(parse_device("cuda").str(), "cuda");
  EXPECT_EQ(parse_device("cuda:0").str(), "cuda");
  EXPECT_EQ(parse_device("cuda:3").index, 3);
  EXPECT_EQ(parse_device("cuda:3").str(), "cuda:3");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cpu:1", "CUDA", ""})
    EXPECT_NE(error_of([&] { parse_device(bad); }), "") << bad;
  EXPECT_NE(error_of([&] { parse_device("tpu"); }).find("cpu, cuda or cuda:N"), std::string::npos);
  EXPECT_EQ(backend_kinds().front(), "cpu");

  const auto dir = std::filesystem::temp_directory_path() / ("splitspec-backend-" + std::to_string(::getpid()));
  Model::random(small_config(), 4)->save(dir.string());
  const std::shared_ptr<Backend> b = open_backend(dir.string(), {parse_device("cpu"), KVType::F16, WType::Q8_0});
  EXPECT_EQ(b->kv_type(), KVType::F16);
  EXPECT_EQ(b->numerics().weight_type, "q8_0");
  // A device this program has no backend for, or none of (no GPU here):
  // either way an error that names the device.
  const std::string e = error_of([&] { open_backend(dir.string(), {parse_device("cuda:1"), KVType::F32, {}}); });
  EXPECT_NE(e.find("cuda"), std::string::npos) << e;
  std::filesystem::remove_all(dir);
}

// A backend that uploads the tensors as stored names them by the digest a
// CPU's in-memory model of the same files has: for a directory, a GGUF file,
// quantized and float, tied or not.
TEST(ModelSource, ItsDigestIsTheLoadedModelsDigest) {
  const auto dir = std::filesystem::temp_directory_path() / ("splitspec-source-" + std::to_string(::getpid()));
  for (const WType t : {WType::F16, WType::Q8_0}) {
    for (const bool tied : {false, true}) {
      ModelConfig c = small_config();
      c.tie_word_embeddings = tied;
      c.attention_bias = !tied;  // some layer vectors too
      const auto m = Model::random(c, 8, t);
      m->save(dir.string());
      write_gguf(c, m->weight_set(), "m", [](GgufWriter&) {}, (dir / "m.gguf").string(), std::nullopt);
      for (const std::string& path : {dir.string(), (dir / "m.gguf").string()}) {
        const ModelSource src = open_model_source(path);
        EXPECT_EQ(source_digest(src.config, src.tensors), Model::load(path)->weights_digest())
            << path << " " << wtype_name(t) << " tied " << tied;
      }
      std::filesystem::remove_all(dir);
    }
  }
}

}  // namespace
}  // namespace splitspec

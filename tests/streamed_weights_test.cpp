// The disk-streamed target: bitwise the in-memory model's logits at every
// budget, with and without the pipeline; weight memory never above the
// budget; the bytes each forward reads are the ones not resident; bad budgets
// and files give clear errors.
#include "common/model/streamed_weights.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/convert/gguf_convert.h"
#include "common/decoding/token_tree.h"
#include "common/model/model.h"
#include "common/util/error.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

// Logits of a prompt forward, a decode step and a tree forward.
std::vector<Rows> three_forwards(const Model& m) {
  KVCache cache = m.new_cache(64);
  std::vector<Rows> out;
  ForwardRequest prompt;
  prompt.tokens = {1, 7, 3, 9, 4};
  out.push_back(m.forward(prompt, cache).logits);
  ForwardRequest step;
  step.tokens = {11};
  out.push_back(m.forward(step, cache).logits);
  ForwardRequest tree;
  tree.tokens = {5, 6, 8, 2};
  const std::vector<int32_t> parents = {-1, 0, -1, 2};
  tree.mask = tree_attention_mask(parents, cache.size());
  tree.positions = {cache.size(), cache.size() + 1, cache.size(), cache.size() + 1};
  out.push_back(m.forward(tree, cache).logits);
  return out;
}

void expect_same(const std::vector<Rows>& a, const std::vector<Rows>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_values(a[i], b[i])) << what << ", forward " << i;
}

}  // namespace

TEST(StreamedWeights, BitwiseEqualToTheInMemoryModelAtEveryBudget) {
  TempDir dir;
  for (WType dtype : {WType::F32, WType::F16, WType::BF16, WType::Q8_0, WType::Q4_0}) {
    for (bool tied : {true, false}) {
      // Wide enough that 30% of a Q4_0 model holds the 4 KiB-aligned buffers.
      ModelConfig c = tiny_config(1000, 3, tied);
      c.hidden_size = 128;
      c.intermediate_size = 256;
      c.head_dim = 32;
      auto source = Model::random(c, 5);
      const std::string path = dir.str(std::string(wtype_name(dtype)) + (tied ? "-tied" : "-untied"));
      source->save(path, dtype);
      auto memory = Model::load(path);
      const auto reference = three_forwards(*memory);
      // The demo target's test below goes down to 10%.
      for (double share : {0.3, 0.6, 2.0}) {
        for (bool pipeline : {false, true}) {
          StreamOptions o;
          o.budget_bytes = static_cast<uint64_t>(share * static_cast<double>(memory->weight_bytes()));
          o.pipeline = pipeline;
          auto streamed = Model::load_streamed(path, o);
          const std::string what = path + " budget " + std::to_string(share) + (pipeline ? " StdPL" : " Std");
          expect_same(reference, three_forwards(*streamed), what);
          // Twice: the loader's read-ahead must stay in step across forwards.
          expect_same(reference, three_forwards(*streamed), what + " (again)");
          const StreamStats s = streamed->stream()->stats();
          EXPECT_LE(s.peak_bytes, o.budget_bytes) << what;
          EXPECT_EQ(s.forwards, 6);
          EXPECT_EQ(s.weight_bytes, memory->weight_bytes());
          if (share < 1) {
            EXPECT_GT(s.streamed_bytes_per_forward, 0u) << what;
          } else {
            EXPECT_EQ(s.streamed_bytes_per_forward, 0u) << what;
          }
        }
      }
    }
  }
}

// A GGUF file streams in place, as llama.cpp's quantizer wrote it: LLaMA's
// query and key rows put back in order as they are read, Qwen3.5's delta-rule
// layers (their vectors, convolution and recurrent weights), Gemma 3's
// sliding layers, Gemma 4's per-layer inputs (their embedding read a row a
// token), K-quants as stored.
TEST(StreamedWeights, GgufFilesStreamBitwiseAsTheyLoad) {
  TempDir dir;
  for (const std::string family : {"llama", "qwen35", "gemma3", "gemma4"}) {
    ModelConfig c = family == "qwen35" ? tiny_qwen35_config(1000, 4)
                    : family == "gemma3" ? tiny_gemma3_config(1000, 3)
                    : family == "gemma4" ? tiny_gemma4_config(1000)
                                         : tiny_config(1000, 3);
    c.architecture = family;
    // Rows of 256, so K-quants apply.
    c.hidden_size = 256;
    c.intermediate_size = 512;
    if (family == "gemma4") {
      c.layer_intermediate_sizes = {512, 512, 512, 512, 1024, 1024, 1024, 1024};
      c.per_layer_input_size = 32;  // a per-layer embedding row of 8 x 32
    } else {
      c.num_attention_heads = 8;
      c.head_dim = 32;
    }
    if (family == "gemma3") c.query_pre_attn_scalar = 32;
    const auto source = Model::random(c, 11, WType::F32, 0.3f);
    for (WType type : {WType::F32, WType::Q8_0, WType::Q4_K}) {
      const std::string path = dir.str(family + "-" + wtype_name(type) + ".gguf");
      write_gguf(source->config(), source->weight_set(), family, [](GgufWriter&) {}, path, type);
      const auto memory = Model::load(path);
      const auto reference = three_forwards(*memory);
      const uint64_t whole = stored_weight_bytes(path);
      EXPECT_EQ(whole, memory->weight_bytes()) << path;
      bool streamed_some = false;
      for (double share : {0.3, 0.6, 2.0}) {
        for (bool pipeline : {false, true}) {
          StreamOptions o;
          o.budget_bytes = static_cast<uint64_t>(share * static_cast<double>(whole));
          o.pipeline = pipeline;
          const std::string what = path + " budget " + std::to_string(share) + (pipeline ? " StdPL" : " Std");
          std::shared_ptr<Model> streamed;
          const std::string e = error_of([&] { streamed = Model::load_streamed(path, o); });
          if (!e.empty()) {
            // A K-quant file's work buffers can outgrow 30% of so small a model.
            EXPECT_NE(e.find("is too small to stream this target"), std::string::npos) << what << ": " << e;
            continue;
          }
          expect_same(reference, three_forwards(*streamed), what);
          expect_same(reference, three_forwards(*streamed), what + " (again)");
          EXPECT_EQ(streamed->weights_digest(), memory->weights_digest()) << what;
          const StreamStats s = streamed->stream()->stats();
          EXPECT_LE(s.peak_bytes, o.budget_bytes) << what;
          streamed_some |= s.streamed_bytes_per_forward > 0;
        }
      }
      EXPECT_TRUE(streamed_some) << path << " never streamed";
    }
  }
}

TEST(StreamedWeights, ReadAheadRingOfAnySizeKeepsTheLogits) {
  // The smallest ring holds only the largest unit, so nearly every read
  // wraps to its start; larger ones wrap at varying places.
  TempDir dir;
  auto source = Model::random(tiny_config(300, 3), 9);
  source->save(dir.str("m"), WType::F16);
  auto memory = Model::load(dir.str("m"));
  const auto reference = three_forwards(*memory);
  StreamOptions o;
  uint64_t smallest = 4096;
  for (;; smallest += 4096) {
    o.read_ahead_bytes = smallest;
    o.budget_bytes = memory->weight_bytes() / 2 + smallest;
    if (error_of([&] { Model::load_streamed(dir.str("m"), o); }).empty()) break;
    ASSERT_LT(smallest, memory->weight_bytes());
  }
  for (uint64_t ring : {smallest, smallest + 4096, 3 * smallest}) {
    o.read_ahead_bytes = ring;
    o.budget_bytes = memory->weight_bytes() / 2 + ring;
    auto streamed = Model::load_streamed(dir.str("m"), o);
    const StreamStats s = streamed->stream()->stats();
    ASSERT_GT(s.streamed_bytes_per_forward, 0u);
    for (int again = 0; again < 3; ++again)
      expect_same(reference, three_forwards(*streamed), "read-ahead " + std::to_string(ring));
    EXPECT_LE(s.peak_bytes, o.budget_bytes);
  }
}

TEST(StreamedWeights, DemoTargetPeakWeightMemoryStaysWithinBudget) {
  // The budgets: 10%, 25% and 50% of the target's weights.
  auto memory = Model::load(demo_target_dir());
  const auto reference = three_forwards(*memory);
  for (double share : {0.10, 0.25, 0.50}) {
    StreamOptions o;
    o.budget_bytes = static_cast<uint64_t>(share * static_cast<double>(memory->weight_bytes()));
    auto streamed = Model::load_streamed(demo_target_dir(), o);
    expect_same(reference, three_forwards(*streamed), "demo target at " + std::to_string(share));
    // Each token's embedding row is read once, then found in the row cache.
    expect_same(reference, three_forwards(*streamed), "demo target at " + std::to_string(share) + " (again)");
    const StreamStats s = streamed->stream()->stats();
    EXPECT_EQ(s.embedding_cache_hits, 10);
    EXPECT_LE(s.peak_bytes, o.budget_bytes);
    EXPECT_EQ(s.peak_bytes, s.fixed_bytes + s.pool_bytes + s.resident_bytes);
    EXPECT_EQ(s.io_mode, "O_DIRECT") << "ext4 supports direct I/O; the page cache must not hold the model";
    // Every forward reads exactly what is not resident, plus embedding rows;
    // the loader may already have read ahead into a next forward, at most a
    // ring's worth.
    EXPECT_GE(s.bytes_read, 6 * s.streamed_bytes_per_forward);
    EXPECT_LT(s.bytes_read, 6 * s.streamed_bytes_per_forward + 64 * 1024 + s.pool_bytes);
    // Less budget, more streaming.
    EXPECT_GT(s.streamed_bytes_per_forward, (1 - share - 0.1) * static_cast<double>(s.weight_bytes) / 2)
        << "a 16-bit file streams about half its fp32 size per forward";
  }
}

TEST(StreamedWeights, ClearErrors) {
  TempDir dir;
  auto source = Model::random(tiny_config(300, 2), 6);
  source->save(dir.str("m"), WType::F16);
  StreamOptions o;
  o.budget_bytes = 1000;
  EXPECT_NE(error_of([&] { Model::load_streamed(dir.str("m"), o); }).find("is too small to stream this target: it needs at least"),
            std::string::npos);
  o.budget_bytes = source->weight_bytes() / 2;
  o.read_ahead_bytes = 1;
  EXPECT_NE(error_of([&] { Model::load_streamed(dir.str("m"), o); }).find("cannot hold this target's largest matrix"),
            std::string::npos);
  o.read_ahead_bytes = 0;
  o.budget_bytes = 1 << 30;
  EXPECT_NE(error_of([&] { Model::load_streamed(dir.str("missing"), o); }).find("does not exist"), std::string::npos);
  // A truncated file fails when opened, naming it.
  const auto file = dir.path() / "m" / "model.safetensors";
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 100);
  EXPECT_NE(error_of([&] { Model::load_streamed(dir.str("m"), o); }).find("model.safetensors"), std::string::npos);
}

TEST(StreamedWeights, AFileThatShrinksWhileStreamingFailsEachForwardCleanly) {
  TempDir dir;
  auto source = Model::random(tiny_config(300, 2), 8);
  source->save(dir.str("m"), WType::F16);
  const auto file = dir.path() / "m" / "model.safetensors";
  for (bool pipeline : {false, true}) {
    std::filesystem::copy_file(file, dir.path() / "copy.safetensors", std::filesystem::copy_options::overwrite_existing);
    StreamOptions o;
    o.budget_bytes = 40000;
    o.pipeline = pipeline;
    auto m = Model::load_streamed(dir.str("m"), o);
    ASSERT_GT(m->stream()->stats().streamed_bytes_per_forward, 0u);
    three_forwards(*m);
    // The file loses its second half under the running model.
    std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
    for (int i = 0; i < 2; ++i) {
      const std::string e = error_of([&] { three_forwards(*m); });
      EXPECT_NE(e.find("model.safetensors"), std::string::npos) << (pipeline ? "StdPL: " : "Std: ") << e;
    }
    std::filesystem::copy_file(dir.path() / "copy.safetensors", file, std::filesystem::copy_options::overwrite_existing);
  }
}

TEST(StreamedWeights, NanWeightsAreRefused) {
  TempDir dir;
  auto source = Model::random(tiny_config(300, 2), 7);
  source->save(dir.str("m"), WType::F32);
  {
    // Overwrite a float in the middle of the data with a NaN.
    const auto file = dir.path() / "m" / "model.safetensors";
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(file) / 2 / 4 * 4));
    const uint32_t nan = 0x7fc00000u;
    f.write(reinterpret_cast<const char*>(&nan), 4);
  }
  StreamOptions o;
  o.budget_bytes = 1 << 30;
  EXPECT_NE(error_of([&] { Model::load_streamed(dir.str("m"), o); }).find("NaN or infinite"), std::string::npos);
}

TEST(StreamedWeights, ParsesSizes) {
  EXPECT_EQ(parse_bytes("8MiB"), 8u << 20);
  EXPECT_EQ(parse_bytes("512 KiB"), 512u << 10);
  EXPECT_EQ(parse_bytes("2MB"), 2000000u);
  EXPECT_EQ(parse_bytes("1000"), 1000u);
  EXPECT_EQ(parse_bytes("25%", 4000), 1000u);
  EXPECT_NE(error_of([] { parse_bytes("lots"); }).find("cannot read 'lots' as a size"), std::string::npos);
  EXPECT_NE(error_of([] { parse_bytes("-3MiB"); }).find("cannot read"), std::string::npos);
  EXPECT_NE(error_of([] { parse_bytes("10%"); }).find("needs the target's size"), std::string::npos);
}

}  // namespace splitspec::test

// GGUF in and out: our models to GGUF and back are the same model at every
// weight type (tensors, greedy tokens, tokenizer bytes); a GGUF vocabulary
// without our tokenizer file rebuilds one that tokenizes identically; the
// fingerprint and a directory's chat template survive each direction; bad
// files are clear errors. (llama.cpp running the files: bench/vs_llamacpp.sh.)
#include "common/weights/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/error.h"
#include "common/convert/gguf_convert.h"
#include "common/weights/safetensors.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

Rows prompt_logits(const Model& m, std::vector<int32_t> tokens = {1, 4274, 824, 261, 615, 7950, 263}) {
  KVCache cache = m.new_cache(64);
  ForwardRequest r;
  r.tokens = std::move(tokens);
  return m.forward(r, cache).logits;
}

// A copy of the GGUF file at `in` without metadata `drop`, and with
// general.architecture set to `arch`.
void rewrite(const std::string& in, const std::string& out, const std::string& drop, const std::string& arch = "llama") {
  const GgufFile f(in);
  GgufWriter w;
  for (const auto& [key, v] : f.metadata()) {
    if (key == drop) continue;
    if (key == "general.architecture") {
      w.add_string(key, arch);
    } else if (v.type == GgufType::kString) {
      w.add_string(key, v.str);
    } else if (v.type == GgufType::kU32) {
      w.add_u32(key, static_cast<uint32_t>(v.i64));
    } else if (v.type == GgufType::kF32) {
      w.add_f32(key, static_cast<float>(v.num));
    } else if (v.type == GgufType::kBool) {
      w.add_bool(key, v.i64 != 0);
    } else if (v.elem == GgufType::kString) {
      w.add_strings(key, v.strs);
    } else if (v.elem == GgufType::kF32) {
      w.add_f32s(key, std::vector<float>(v.nums.begin(), v.nums.end()));
    } else if (v.elem == GgufType::kI32) {
      w.add_i32s(key, std::vector<int32_t>(v.nums.begin(), v.nums.end()));
    } else {
      w.add_bytes(key, v.bytes);
    }
  }
  for (const GgufTensor& t : f.tensors()) w.add_tensor(t.name, t.ne, static_cast<GgmlType>(t.type), t.data, t.nbytes);
  w.write(out);
}

}  // namespace

TEST(Gguf, RoundTripIsTheSameModelAtEveryType) {
  TempDir dir;
  const auto source = Model::load(demo_target_dir());
  for (WType t : {WType::F32, WType::F16, WType::BF16, WType::Q8_0, WType::Q4_0}) {
    const std::string gguf = dir.str(std::string(wtype_name(t)) + ".gguf");
    const std::string back = dir.str(std::string(wtype_name(t)) + "-back");
    export_gguf(demo_target_dir(), gguf, t);
    import_gguf(gguf, back, std::nullopt);
    const auto m = Model::load(back);
    EXPECT_EQ(m->weight_type(), t);
    // The model converted in memory, and the one that went through GGUF.
    EXPECT_TRUE(same_values(prompt_logits(*m), prompt_logits(*Model::load(demo_target_dir(), t)))) << wtype_name(t);
    EXPECT_EQ(read_file(back + "/tokenizer.model"), read_file(demo_target_dir() + "/tokenizer.model"));
    EXPECT_EQ(load_model_config(back).vocab_size, source->config().vocab_size);
    EXPECT_TRUE(load_model_config(back).tie_word_embeddings);
  }
  // As stored (F16): the weights come back bit for bit.
  export_gguf(demo_target_dir(), dir.str("as-stored.gguf"), std::nullopt);
  import_gguf(dir.str("as-stored.gguf"), dir.str("as-stored"), std::nullopt);
  EXPECT_TRUE(same_values(prompt_logits(*Model::load(dir.str("as-stored"))), prompt_logits(*source)));
  const GgufFile f(dir.str("as-stored.gguf"));
  EXPECT_EQ(f.get("general.architecture").str, "llama");
  EXPECT_EQ(f.get("llama.block_count").i64, source->config().num_hidden_layers);
  EXPECT_EQ(f.tensor("output.weight"), nullptr);  // tied: llama.cpp uses token_embd
  ASSERT_NE(f.tensor("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(f.tensor("blk.0.attn_q.weight")->ne, (std::vector<int64_t>{256, 256}));
}

TEST(Gguf, UntiedModelKeepsItsHead) {
  TempDir dir;
  auto m = Model::random(tiny_config(8000, 2, false), 3);
  m->save(dir.str("m"));
  std::filesystem::copy_file(demo_target_dir() + "/tokenizer.model", dir.str("m/tokenizer.model"));
  export_gguf(dir.str("m"), dir.str("m.gguf"), WType::Q4_0);
  EXPECT_NE(GgufFile(dir.str("m.gguf")).tensor("output.weight"), nullptr);
  import_gguf(dir.str("m.gguf"), dir.str("back"), std::nullopt);
  EXPECT_FALSE(load_model_config(dir.str("back")).tie_word_embeddings);
  const auto back = Model::load(dir.str("back"));
  EXPECT_EQ(back->weight_set().lm_head.type, WType::Q8_0);  // a Q4_0 model's head stays at Q8_0
  EXPECT_TRUE(same_values(prompt_logits(*back), prompt_logits(*Model::load(dir.str("m"), WType::Q4_0))));
  // A vocabulary the tokenizer does not have is refused.
  auto small = Model::random(tiny_config(64, 2, false), 3);
  small->save(dir.str("small"));
  std::filesystem::copy_file(demo_target_dir() + "/tokenizer.model", dir.str("small/tokenizer.model"));
  EXPECT_NE(error_of([&] { export_gguf(dir.str("small"), dir.str("s.gguf"), std::nullopt); })
                .find("8000 pieces for a vocabulary of 64"),
            std::string::npos);
}

TEST(Gguf, VocabularyWithoutOurTokenizerFileTokenizesTheSame) {
  TempDir dir;
  export_gguf(demo_target_dir(), dir.str("a.gguf"), std::nullopt);
  rewrite(dir.str("a.gguf"), dir.str("b.gguf"), "splitspec.tokenizer.sentencepiece_model");
  import_gguf(dir.str("b.gguf"), dir.str("b"), std::nullopt);
  // Kept in llama.cpp's form, the vocabulary as the file has it.
  EXPECT_TRUE(std::filesystem::exists(dir.str("b/tokenizer.gguf")));
  EXPECT_FALSE(std::filesystem::exists(dir.str("b/tokenizer.model")));
  const Tokenizer original(demo_target_dir()), rebuilt(dir.str("b"));
  EXPECT_EQ(rebuilt.fingerprint(), Tokenizer(dir.str("b.gguf")).fingerprint());
  for (const std::string& text : {std::string("Once upon a time, there was a dog."), std::string("  two  spaces\tand a tab\n"),
                                  std::string("ünïcödé ✓ 日本語 🙂"), std::string("1234567890"), std::string(""),
                                  std::string("<s> not special </s>")}) {
    EXPECT_EQ(rebuilt.encode(text), original.encode(text)) << text;
    EXPECT_EQ(rebuilt.decode(original.encode(text)), original.decode(original.encode(text))) << text;
  }
  for (const std::string& p : test_prompts()) EXPECT_EQ(rebuilt.encode(p), original.encode(p));
  EXPECT_EQ(rebuilt.bos_id(), original.bos_id());
  EXPECT_EQ(rebuilt.eos_id(), original.eos_id());
}

// A SentencePiece directory's chat template (tokenizer_config.json) goes
// into the GGUF and comes back, and every form has the directory's
// fingerprint, so its draft pairs with any of them.
TEST(Gguf, FingerprintAndChatTemplateSurviveEachDirection) {
  TempDir dir;
  std::filesystem::copy(demo_target_dir(), dir.str("src"), std::filesystem::copy_options::recursive);
  const std::string chat = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}";
  std::ofstream(dir.str("src/tokenizer_config.json")) << nlohmann::json{{"chat_template", chat}}.dump();
  export_gguf(dir.str("src"), dir.str("a.gguf"), std::nullopt);
  EXPECT_EQ(GgufFile(dir.str("a.gguf")).get("tokenizer.chat_template").str, chat);
  import_gguf(dir.str("a.gguf"), dir.str("back"), std::nullopt);
  export_gguf(dir.str("back"), dir.str("again.gguf"), std::nullopt);
  const std::string fp = Tokenizer(demo_draft_dir()).fingerprint();
  for (const std::string& form : {dir.str("src"), dir.str("a.gguf"), dir.str("back"), dir.str("again.gguf")}) {
    const Tokenizer t(form);
    EXPECT_EQ(t.fingerprint(), fp) << form;
    EXPECT_EQ(t.chat_template(), chat) << form;
    EXPECT_EQ(t.encode("Once upon a time, there was a dog."), Tokenizer(demo_target_dir()).encode("Once upon a time, there was a dog."))
        << form;
  }
  EXPECT_EQ(read_file(dir.str("back/tokenizer.model")), read_file(demo_target_dir() + "/tokenizer.model"));
}

TEST(Gguf, BadFilesAreClearErrors) {
  TempDir dir;
  export_gguf(demo_target_dir(), dir.str("good.gguf"), WType::Q4_0);
  const std::string good = read_file(dir.str("good.gguf"));
  auto import_error = [&](const std::string& bytes) {
    write_file(dir.str("bad.gguf"), bytes);
    return error_of([&] { import_gguf(dir.str("bad.gguf"), dir.str("out"), std::nullopt); });
  };
  std::string bad = good;
  bad[0] = 'X';
  EXPECT_NE(import_error(bad).find("not a GGUF file"), std::string::npos);
  EXPECT_NE(import_error(good.substr(0, good.size() / 2)).find("truncated?"), std::string::npos);
  EXPECT_NE(import_error(good.substr(0, 1000)).find("truncated"), std::string::npos);
  EXPECT_NE(import_error(good.substr(0, 60)).find("truncated GGUF file"), std::string::npos);
  EXPECT_NE(import_error(good.substr(0, 10)).find("shorter than a GGUF header"), std::string::npos);
  bad = good;
  bad[4] = 7;  // version
  EXPECT_NE(import_error(bad).find("GGUF version 7 is not supported"), std::string::npos);
  // A tensor of a type we do not read (IQ2_XXS is 16): its type field
  // follows the name, the dimension count and two dimensions.
  bad = good;
  const std::string name = "blk.0.attn_v.weight";
  const size_t at = bad.find(name) + name.size() + 4 + 2 * 8;
  const uint32_t iq2_xxs = 16;
  std::memcpy(&bad[at], &iq2_xxs, 4);
  EXPECT_NE(import_error(bad).find("is IQ2_XXS, which SplitSpec does not read"), std::string::npos);
  rewrite(dir.str("good.gguf"), dir.str("gpt2.gguf"), "", "gpt2");
  EXPECT_NE(error_of([&] { import_gguf(dir.str("gpt2.gguf"), dir.str("out"), std::nullopt); })
                .find("architecture 'gpt2' is not supported"),
            std::string::npos);
  rewrite(dir.str("good.gguf"), dir.str("nolen.gguf"), "llama.block_count");
  EXPECT_NE(error_of([&] { import_gguf(dir.str("nolen.gguf"), dir.str("out"), std::nullopt); })
                .find("'llama.block_count' is missing"),
            std::string::npos);
  EXPECT_NE(error_of([&] { import_gguf(dir.str("missing.gguf"), dir.str("out"), std::nullopt); }).find("cannot open"),
            std::string::npos);
  // A string array claiming 2^40 entries, and a tensor offset near 2^64:
  // clear errors, never an allocation of that size or a wrapped pointer.
  bad = good;
  const std::string tokens_key = "tokenizer.ggml.tokens";
  const size_t count_at = bad.find(tokens_key) + tokens_key.size() + 4 + 4;  // value type, element type
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(&bad[count_at], &huge, 8);
  EXPECT_NE(import_error(bad).find("claims 1099511627776 strings"), std::string::npos);
  bad = good;
  const size_t offset_at = bad.find(name) + name.size() + 4 + 2 * 8 + 4;  // the tensor type, then its offset
  const uint64_t wrap = ~uint64_t{0} - 31;
  std::memcpy(&bad[offset_at], &wrap, 8);
  EXPECT_NE(import_error(bad).find("lies outside the file"), std::string::npos);
}

TEST(Gguf, StoriesConvertsAndKeepsItsOddWidthsAtF16) {
  const auto shared = shared_dir();
  if (!shared) GTEST_SKIP() << "../shared is absent: stories260K conversion not checked";
  TempDir dir;
  const std::string src = (*shared / "models" / "stories260K").string();
  export_gguf(src, dir.str("s.gguf"), std::nullopt);
  import_gguf(dir.str("s.gguf"), dir.str("s"), std::nullopt);
  auto logits = [](const Model& m) {
    KVCache cache = m.new_cache(16);
    ForwardRequest r;
    r.tokens = {1, 40, 50, 60};
    return m.forward(r, cache).logits;
  };
  EXPECT_TRUE(same_values(logits(*Model::load(dir.str("s"))), logits(*Model::load(src))));
  // Its feed-forward width (172) is not a multiple of 32: as llama.cpp's
  // quantizer does, those rows (ffn_down's) stay F16, the rest are Q4_0.
  export_gguf(src, dir.str("q.gguf"), WType::Q4_0);
  const auto q = Model::load(dir.str("q.gguf"));
  EXPECT_EQ(q->weight_set().layers[0][static_cast<int>(LayerMatrix::kDown)].type, WType::F16);
  EXPECT_EQ(q->weight_set().layers[0][static_cast<int>(LayerMatrix::kGate)].type, WType::Q4_0);
  EXPECT_EQ(logits(*q).cols(), 512);
}

}  // namespace splitspec::test

namespace splitspec::test {
namespace {

// The families' tiny models have 64 tokens.
Rows family_logits(const Model& m) { return prompt_logits(m, {1, 5, 9, 20, 33, 2, 60}); }

// Every family written as GGUF (llama.cpp's names, Phi-3's fused matrices,
// LLaMA's interleaved query and key rows) and as a directory reads back as
// the same model, bit for bit, loaded in place.
TEST(GgufFamilies, EachFamilyRoundTripsThroughGgufAndDirectory) {
  TempDir dir;
  for (const std::string arch : {"llama", "qwen2", "qwen3", "phi3", "gemma3", "phi3-longrope"}) {
    ModelConfig c = tiny_config(64, 2, arch == "qwen2");
    c.architecture = arch;
    c.attention_bias = arch == "qwen2";
    c.qk_norm = arch == "qwen3";
    if (arch == "qwen3") c.head_dim = 16;  // not hidden / heads
    if (arch == "llama") c.rope_freq_factors = llama3_rope_factors(500000.0, c.head_dim, 8.0, 1.0, 4.0, 16);
    if (arch == "gemma3") c = tiny_gemma3_config(64, 3);
    if (arch == "phi3-longrope") c = tiny_longrope_config(64, 2);
    const auto m = Model::random(c, 3, WType::F32, 0.3f);
    const std::string gguf = dir.str(arch + ".gguf");
    write_gguf(m->config(), m->weight_set(), arch, [](GgufWriter&) {}, gguf, std::nullopt);
    const auto from_gguf = Model::load(gguf);
    EXPECT_EQ(from_gguf->config().architecture, c.architecture);
    EXPECT_EQ(from_gguf->config().rope_freq_factors, c.rope_freq_factors);
    EXPECT_EQ(from_gguf->config().rope_long_factors, c.rope_long_factors);
    EXPECT_EQ(from_gguf->config().rotary_dim, c.rotary_dim);
    EXPECT_EQ(from_gguf->config().sliding_window_pattern, c.sliding_window_pattern);
    EXPECT_TRUE(same_values(family_logits(*from_gguf), family_logits(*m))) << arch << " from GGUF";
    const std::string out = dir.str(arch + "-dir");
    Model::load(gguf)->save(out);
    const auto from_dir = Model::load(out);
    EXPECT_TRUE(same_values(family_logits(*from_dir), family_logits(*m))) << arch << " from a directory";
    // Streamed from disk under a budget: the same forward.
    StreamOptions s;
    s.budget_bytes = stored_weight_bytes(out) * 4;
    s.direct_io = false;
    EXPECT_TRUE(same_values(family_logits(*Model::load_streamed(out, s)), family_logits(*m))) << arch << " streamed";
  }
}

// A Hugging Face Phi-3 directory fuses the query, key and value rows, and the
// gate's and up projection's: read in place as row slices.
TEST(GgufFamilies, HuggingFacePhi3FusedTensorsAreSplitByRows) {
  TempDir dir;
  ModelConfig c = tiny_config(64, 1);
  c.architecture = "phi3";
  const auto m = Model::random(c, 5);
  const WeightSet& w = m->weight_set();
  std::vector<std::vector<uint8_t>> keep;
  std::vector<TensorToWrite> t;
  auto add = [&](const std::string& name, std::vector<const MatrixRef*> parts) {
    std::vector<uint8_t> b;
    int64_t rows = 0;
    for (const MatrixRef* p : parts) {
      const auto* d = static_cast<const uint8_t*>(p->data);
      b.insert(b.end(), d, d + p->bytes());
      rows += p->rows;
    }
    keep.push_back(std::move(b));
    t.push_back({name, DType::F32, parts.size() == 1 && parts[0]->rows == 1 ? std::vector<int64_t>{parts[0]->cols}
                                                                              : std::vector<int64_t>{rows, parts[0]->cols},
                 keep.back().data(), keep.back().size()});
  };
  const auto& layer = w.layers[0];
  auto L = [&](LayerMatrix m) { return &layer[static_cast<int>(m)]; };
  const MatrixRef in{WType::F32, w.input_norm(0), 1, c.hidden_size}, post{WType::F32, w.post_norm(0), 1, c.hidden_size},
      fin{WType::F32, w.final_norm(), 1, c.hidden_size};
  add(kEmbedName, {&w.embed});
  add(kHeadName, {&w.lm_head});
  add(kFinalNormName, {&fin});
  add(layer_norm_name(0, false), {&in});
  add(layer_norm_name(0, true), {&post});
  add("model.layers.0.self_attn.qkv_proj.weight", {L(LayerMatrix::kQ), L(LayerMatrix::kK), L(LayerMatrix::kV)});
  add(layer_matrix_name(0, LayerMatrix::kO), {L(LayerMatrix::kO)});
  add("model.layers.0.mlp.gate_up_proj.weight", {L(LayerMatrix::kGate), L(LayerMatrix::kUp)});
  add(layer_matrix_name(0, LayerMatrix::kDown), {L(LayerMatrix::kDown)});
  write_safetensors(dir.str("model.safetensors"), t);
  std::ofstream(dir.str("config.json")) << model_config_to_json(c);
  EXPECT_TRUE(same_values(family_logits(*Model::load(dir.str())), family_logits(*m)));
  // Converted at load: each part copied, its fused tensor's pages dropped
  // (the load once looked the parts up by their own names, and threw).
  std::shared_ptr<Model> q8;
  EXPECT_NO_THROW(q8 = Model::load(dir.str(), WType::Q8_0));
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->weight_set().layers[0][0].type, WType::Q8_0);
}

TEST(GgufFamilies, UnsupportedArchitectureNamesTheSupportedOnes) {
  TempDir dir;
  const auto m = Model::random(tiny_config(64, 1), 1);
  write_gguf(m->config(), m->weight_set(), "x", [](GgufWriter&) {}, dir.str("a.gguf"), std::nullopt);
  rewrite(dir.str("a.gguf"), dir.str("b.gguf"), "", "falcon");
  EXPECT_NE(error_of([&] { Model::load(dir.str("b.gguf")); })
                .find("architecture 'falcon' is not supported; SplitSpec runs llama, qwen2, qwen3, phi3, gemma3"),
            std::string::npos);
}

}  // namespace
}  // namespace splitspec::test

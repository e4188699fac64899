// A model family SplitSpec does not ship, written here as one Family and
// registered by one line, as a new family's file in common/model/families/
// is: tensor names of its own (GGUF ffn_out, Hugging Face ffn_norm), a fused
// split (its key and value rows in one kv_proj, GGUF attn_kv), a config key
// of its own in config.json and in GGUF metadata (toy_rope_base), a chat
// template and a pre-tokenizer. It loads from GGUF and survives GGUF ->
// directory -> GGUF with the same logits, bit for bit (and at Q8_0, the
// fused tensor at one type), the same vocabulary and the same template.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/convert/gguf_convert.h"
#include "common/model/family.h"
#include "common/model/model.h"
#include "common/util/error.h"
#include "common/tokenizer/tokenizer.h"
#include "common/weights/safetensors.h"
#include "tests/test_util.h"

namespace splitspec::test {
namespace {

using nlohmann::json;

Family toy_family() {
  Family f;
  f.name = "toyfam";
  f.hf = {{"ToyForCausalLM", "toy", 1e-5, 512, 1, 2}};
  f.qk_norm = true;
  f.fusions = {{"self_attn.kv_proj.weight", {LayerMatrix::kK, LayerMatrix::kV}}};
  f.gguf_names = {{"self_attn.kv_proj.weight", "attn_kv.weight"}, {"mlp.down_proj.weight", "ffn_out.weight"}};
  f.hf_names = {{"post_attention_layernorm.weight", "ffn_norm.weight"}};
  // Its configs name the RoPE base toy_rope_base, and so do its GGUF files.
  f.read_hf = [](const json& j, ModelConfig& c, const std::string& source) {
    c.rope_theta = config_number(j, "toy_rope_base", 10000.0, source);
  };
  f.write_hf = [](const ModelConfig& c, json& j) {
    j.erase("rope_theta");
    j["toy_rope_base"] = c.rope_theta;
  };
  f.read_gguf = [](const GgufFile& file, ModelConfig& c) {
    if (!file.has("toyfam.toy_rope_base")) throw Error(file.path() + ": no toyfam.toy_rope_base");
    c.rope_theta = gguf_number(file, "toyfam.toy_rope_base", 0.0);
  };
  f.write_gguf = [](const ModelConfig& c, GgufWriter& g, const std::string&) {
    g.add_f32("toyfam.toy_rope_base", static_cast<float>(c.rope_theta));
  };
  f.chat_templates = {{"toychat", [](const std::string& src) { return src.find("<|turn|>") != std::string::npos; },
                       [](const std::vector<ChatMessage>& messages, bool add_assistant) {
                         ChatWriter w;
                         for (const ChatMessage& m : messages) w.tpl("<|turn|>" + m.role + ":").content(m.content);
                         if (add_assistant) w.tpl("<|turn|>assistant:");
                         return w.done();
                       }}};
  // Every digit a word of its own, then letters with their leading space.
  f.pre_tokenizers = {{{"toy-digits"},
                       {{"\\p{N}", PreTokenizerPattern::Gaps::kWhole},
                        {" ?\\p{L}+| ?[^\\s\\p{L}\\p{N}]+|\\s+", PreTokenizerPattern::Gaps::kPerCodePoint}}}};
  return f;
}

// The one registration line (a shipped family's is in families.inc).
const bool kRegistered = (register_family(toy_family()), true);

// 64 tokens: specials, the byte-level stand-ins of a-z, 0-9 and space (Ġ),
// and merged words; "1 2" is a merge the pre-tokenizer keeps apart.
void add_toy_vocabulary(GgufWriter& g) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<|turn|>"};
  for (char ch = 'a'; ch <= 'z'; ++ch) tokens.push_back(std::string(1, ch));
  for (char ch = '0'; ch <= '9'; ++ch) tokens.push_back(std::string(1, ch));
  tokens.push_back("\xc4\xa0");  // U+0120, the space's stand-in
  const std::vector<std::string> merges = {"a b", "\xc4\xa0 ab", "1 2"};
  for (const std::string& m : merges) tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
  while (tokens.size() < 64) tokens.push_back("<pad" + std::to_string(tokens.size()) + ">");
  std::vector<int32_t> types(tokens.size(), 1);
  for (int i : {0, 1, 2, 3}) types[static_cast<size_t>(i)] = 3;
  g.add_string("tokenizer.ggml.model", "gpt2");
  g.add_strings("tokenizer.ggml.tokens", tokens);
  g.add_i32s("tokenizer.ggml.token_type", types);
  g.add_strings("tokenizer.ggml.merges", merges);
  g.add_u32("tokenizer.ggml.bos_token_id", 1);
  g.add_u32("tokenizer.ggml.eos_token_id", 2);
  g.add_bool("tokenizer.ggml.add_bos_token", false);
  g.add_string("tokenizer.ggml.pre", "toy-digits");
  // Found by its marker, as a downloaded model's Jinja source is.
  g.add_string("tokenizer.chat_template",
               "{% for m in messages %}<|turn|>{{ m.role }}:{{ m.content }}{% endfor %}"
               "{% if add_generation_prompt %}<|turn|>assistant:{% endif %}");
}

std::vector<float> logits(const Model& m) {
  KVCache cache = m.new_cache(16);
  ForwardRequest r;
  r.tokens = {1, 5, 9, 20, 33, 2, 60};
  const Rows out = m.forward(r, cache).logits;
  return {out.data(), out.data() + out.size()};
}

TEST(NewFamily, IsOneFileAndOneLineAndSurvivesAConvertRoundTrip) {
  ASSERT_TRUE(kRegistered);
  TempDir dir;
  ModelConfig c = tiny_config(64, 2);
  c.architecture = "toyfam";
  c.qk_norm = true;
  c.rope_theta = 5000.0;
  const auto m = Model::random(c, 11, WType::F32, 0.3f);
  const std::vector<float> want = logits(*m);

  const std::string gguf = dir.str("toy.gguf");
  write_gguf(m->config(), m->weight_set(), "toy", add_toy_vocabulary, gguf, std::nullopt);
  {
    const GgufFile f(gguf);
    EXPECT_EQ(f.get("general.architecture").str, "toyfam");
    const GgufTensor* kv = f.tensor("blk.1.attn_kv.weight");
    ASSERT_NE(kv, nullptr);
    EXPECT_EQ(kv->ne, (std::vector<int64_t>{c.hidden_size, 2 * c.num_key_value_heads * c.head_dim}));
    EXPECT_EQ(f.tensor("blk.1.attn_k.weight"), nullptr);
    EXPECT_NE(f.tensor("blk.1.ffn_out.weight"), nullptr);
    EXPECT_NE(f.tensor("blk.1.attn_q_norm.weight"), nullptr);
    EXPECT_EQ(f.get("toyfam.toy_rope_base").num, 5000.0);
  }
  const auto from_gguf = Model::load(gguf);
  EXPECT_EQ(from_gguf->config().architecture, "toyfam");
  EXPECT_TRUE(from_gguf->config().qk_norm);
  EXPECT_EQ(logits(*from_gguf), want) << "from GGUF";

  const std::string back = dir.str("toy-dir");
  import_gguf(gguf, back, std::nullopt);
  const json config = json::parse(read_file(dir.path() / "toy-dir" / "config.json"));
  EXPECT_EQ(config["architectures"], json::array({"ToyForCausalLM"}));
  EXPECT_EQ(config["toy_rope_base"], 5000.0);
  EXPECT_FALSE(config.contains("rope_theta"));
  const SafetensorsFile st(back + "/model.safetensors");
  EXPECT_EQ(st.tensors().at("model.layers.0.self_attn.kv_proj.weight").shape,
            (std::vector<int64_t>{2 * c.num_key_value_heads * c.head_dim, c.hidden_size}));
  EXPECT_EQ(st.tensors().count("model.layers.0.ffn_norm.weight"), 1u);
  EXPECT_EQ(st.tensors().count("model.layers.0.post_attention_layernorm.weight"), 0u);
  const auto from_dir = Model::load(back);
  EXPECT_EQ(from_dir->config().rope_theta, 5000.0);
  EXPECT_EQ(logits(*from_dir), want) << "from the directory";

  const std::string again = dir.str("again.gguf");
  export_gguf(back, again, std::nullopt);
  EXPECT_EQ(logits(*Model::load(again)), want) << "from the GGUF written from the directory";
  // Quantized on the way out, the fused tensor at one type: the same model
  // as the directory quantized at load.
  const std::string q8 = dir.str("q8.gguf");
  export_gguf(back, q8, WType::Q8_0);
  EXPECT_EQ(GgufFile(q8).tensor("blk.0.attn_kv.weight")->type, static_cast<uint32_t>(GgmlType::kQ8_0));
  EXPECT_EQ(logits(*Model::load(q8)), logits(*Model::load(back, WType::Q8_0))) << "Q8_0";

  // The pre-tokenizer keeps "12" apart although a merge would join it; the
  // chat template is found by its marker in the file's Jinja source.
  const Tokenizer tok(again);
  const int32_t one = 30 + 1, two = 30 + 2, ab = 41, space_ab = 42;
  EXPECT_EQ(tok.tokenize("ab ab12", false, false), (std::vector<int32_t>{ab, space_ab, one, two}));
  EXPECT_NE(tok.chat_template(), "toychat");
  EXPECT_EQ(detect_chat_template(tok.chat_template()), "toychat");
  EXPECT_EQ(apply_chat_template(tok.chat_template(), {{"user", "hi"}}, true), "<|turn|>user:hi<|turn|>assistant:");
}

TEST(NewFamily, RegistrationRefusesTakenNamesAndBadPatternsLeavingNothing) {
  ASSERT_TRUE(kRegistered);
  EXPECT_NE(error_of([] { register_family(toy_family()); }).find("'toyfam' is already registered"), std::string::npos);
  Family other = toy_family();
  other.name = "toyfam2";
  EXPECT_NE(error_of([&] { register_family(other); }).find("'ToyForCausalLM' is already toyfam's"), std::string::npos);
  EXPECT_NE(error_of([] { find_family("falcon"); }).find("SplitSpec runs llama, qwen2, qwen3, phi3, gemma3, qwen35, gemma4, toyfam"),
            std::string::npos);
  Family bad = toy_family();
  bad.name = "badfam";
  bad.hf = {{"BadForCausalLM", "bad"}};
  bad.chat_templates[0].name = "badchat";
  bad.pre_tokenizers = {{{"bad-pre"}, {{"(", PreTokenizerPattern::Gaps::kWhole}}}};
  EXPECT_NE(error_of([&] { register_family(bad); }).find("pre-tokenizer bad-pre: cannot compile /(/"), std::string::npos);
  EXPECT_EQ(family_names(), "llama, qwen2, qwen3, phi3, gemma3, qwen35, gemma4, toyfam");
  const std::vector<std::string> templates = chat_template_names();
  EXPECT_EQ(std::count(templates.begin(), templates.end(), "badchat"), 0);
  EXPECT_FALSE(is_supported_pre_tokenizer("bad-pre"));
}

}  // namespace
}  // namespace splitspec::test

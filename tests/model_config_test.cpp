#include "common/model/model_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/util/error.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

nlohmann::json valid_json() { return nlohmann::json::parse(model_config_to_json(tiny_config())); }

std::string error_of(const nlohmann::json& j) {
  try {
    parse_model_config(j.dump(), "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ModelConfig, RoundTripsThroughJson) {
  const ModelConfig c = tiny_config();
  const ModelConfig d = parse_model_config(model_config_to_json(c), "x");
  EXPECT_EQ(d.hidden_size, c.hidden_size);
  EXPECT_EQ(d.num_key_value_heads, c.num_key_value_heads);
  EXPECT_EQ(d.head_dim, c.head_dim);
  EXPECT_EQ(d.tie_word_embeddings, c.tie_word_embeddings);
}

TEST(ModelConfig, HeadDimDefaultsToHiddenOverHeads) {
  auto j = valid_json();
  j.erase("head_dim");
  EXPECT_EQ(parse_model_config(j.dump(), "x").head_dim, 8);
}

TEST(ModelConfig, EosListTakesFirst) {
  auto j = valid_json();
  j["eos_token_id"] = {2, 3};
  EXPECT_EQ(parse_model_config(j.dump(), "x").eos_token_id, 2);
}

TEST(ModelConfigBadInput, EachRequiredFieldIsNamedWhenMissing) {
  for (const char* field : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                            "vocab_size"}) {
    auto j = valid_json();
    j.erase(field);
    EXPECT_EQ(error_of(j), std::string("cfg.json: missing required field '") + field + "'");
  }
}

TEST(ModelConfigBadInput, WrongTypesAndValues) {
  auto j = valid_json();
  j["hidden_size"] = "big";
  EXPECT_NE(error_of(j).find("'hidden_size' must be an integer"), std::string::npos);
  j = valid_json();
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of(j).find("multiple of num_key_value_heads"), std::string::npos);
  j = valid_json();
  j["vocab_size"] = 0;
  EXPECT_NE(error_of(j).find("'vocab_size' must be positive"), std::string::npos);
  j = valid_json();
  j["eos_token_id"] = 1000;
  EXPECT_NE(error_of(j).find("eos_token_id 1000 outside the vocabulary"), std::string::npos);
}

// Keys a Hugging Face config may leave out take Hugging Face's defaults.
TEST(ModelConfig, MissingKeysTakeHuggingFaceDefaults) {
  auto j = valid_json();
  for (const char* key : {"num_key_value_heads", "rope_theta", "tie_word_embeddings", "rms_norm_eps",
                          "max_position_embeddings", "bos_token_id", "eos_token_id"})
    j.erase(key);
  const ModelConfig c = parse_model_config(j.dump(), "x");
  EXPECT_EQ(c.num_key_value_heads, c.num_attention_heads);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
}

TEST(ModelConfig, FamiliesSetTheirOptions) {
  auto j = valid_json();
  j["architectures"] = {"Qwen2ForCausalLM"};
  EXPECT_EQ(parse_model_config(j.dump(), "x").architecture, "qwen2");
  EXPECT_TRUE(parse_model_config(j.dump(), "x").attention_bias);
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 16;  // not hidden / heads
  const ModelConfig q3 = parse_model_config(j.dump(), "x");
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.head_dim, 16);
  j = valid_json();
  j["architectures"] = {"Phi3ForCausalLM"};
  j["sliding_window"] = 32;
  const ModelConfig phi = parse_model_config(j.dump(), "x");
  EXPECT_EQ(phi.architecture, "phi3");
  EXPECT_EQ(phi.max_position_embeddings, 32);  // capped to the window
  // The config written back reads as the same model.
  const ModelConfig again = parse_model_config(model_config_to_json(phi), "y");
  EXPECT_EQ(again.architecture, "phi3");
  EXPECT_EQ(again.max_position_embeddings, 32);
  j = valid_json();
  j["architectures"] = {"MistralForCausalLM"};
  EXPECT_EQ(parse_model_config(j.dump(), "x").architecture, "llama");
  j["eos_token_id"] = {2, 3};
  EXPECT_TRUE(is_end_of_generation(parse_model_config(j.dump(), "x"), 3));
}

// Llama 3.1's rope_scaling, as Hugging Face computes it: high frequencies
// kept, low ones divided by the factor, the middle smoothed.
TEST(ModelConfig, Llama3RopeScalingGivesFrequencyDivisors) {
  auto j = valid_json();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  j["rope_theta"] = 500000.0;
  const ModelConfig c = parse_model_config(j.dump(), "x");
  ASSERT_EQ(c.rope_freq_factors.size(), static_cast<size_t>(c.head_dim / 2));
  EXPECT_EQ(c.rope_freq_factors.front(), 1.0f);
  EXPECT_EQ(c.rope_freq_factors.back(), 8.0f);
  const ModelConfig again = parse_model_config(model_config_to_json(c), "y");
  EXPECT_EQ(again.rope_freq_factors, c.rope_freq_factors);
}

TEST(ModelConfigBadInput, UnsupportedArchitectures) {
  auto j = valid_json();
  j["architectures"] = {"MambaForCausalLM"};
  EXPECT_NE(error_of(j).find("unsupported architecture \"MambaForCausalLM\"; SplitSpec runs LlamaForCausalLM"),
            std::string::npos);
  // Gemma 4's directories are its family's, refused naming what reads them.
  j = valid_json();
  j["architectures"] = {"Gemma4ForCausalLM"};
  EXPECT_NE(error_of(j).find("convert_hf_to_gguf.py"), std::string::npos);
  j = valid_json();
  j.erase("architectures");
  j["model_type"] = "gpt2";
  EXPECT_NE(error_of(j).find("unsupported model_type"), std::string::npos);
  j = valid_json();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}};
  EXPECT_NE(error_of(j).find("rope_scaling type 'yarn' is not supported"), std::string::npos);
  j = valid_json();
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  EXPECT_NE(error_of(j).find("'dynamic' is not supported"), std::string::npos);
  j = valid_json();
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  EXPECT_NE(error_of(j).find("rope_scaling needs 'short_factor' with"), std::string::npos);
  j = valid_json();
  j["hidden_act"] = "gelu";
  EXPECT_NE(error_of(j).find("hidden_act"), std::string::npos);
}

TEST(ModelConfigBadInput, NotJson) {
  try {
    parse_model_config("{hidden_size: 3", "cfg.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json: not valid JSON"), std::string::npos);
  }
}

}  // namespace splitspec::test

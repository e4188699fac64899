#include "common/engine/model_config.h"

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
                            "num_key_value_heads", "vocab_size", "rms_norm_eps", "rope_theta",
                            "max_position_embeddings", "tie_word_embeddings", "bos_token_id", "eos_token_id"}) {
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

TEST(ModelConfigBadInput, UnsupportedArchitectures) {
  auto j = valid_json();
  j["architectures"] = {"MistralForCausalLM"};
  EXPECT_NE(error_of(j).find("unsupported architecture"), std::string::npos);
  j = valid_json();
  j["model_type"] = "gpt2";
  EXPECT_NE(error_of(j).find("unsupported model_type"), std::string::npos);
  j = valid_json();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_NE(error_of(j).find("rope_scaling"), std::string::npos);
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

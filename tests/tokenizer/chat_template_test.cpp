// Chat templates against llama.cpp's llama_chat_apply_template: the expected
// prompts below are its output (bench/llamacpp_bench.c's `chat` command, the
// libllama of node-llama-cpp 3.22.1; "llama2" there is "llama2-sys"), and
// the real templates of llama.cpp's models/templates must be recognized as
// its llm_chat_detect_template recognizes them.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/tokenizer/chat_template.h"
#include "common/util/error.h"

namespace splitspec::test {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "  Hi there  "},
    {"user", "Who are you?"},
};

// Whitespace to trim or keep, an empty message, system messages after the
// first turn, run together and last, and UTF-8 and JSON-special text.
const std::vector<ChatMessage> kEdgeCases = {
    {"system", " Be brief. "},
    {"user", "  Hi\n"},
    {"assistant", ""},
    {"system", "Use English."},
    {"system", " And French\t"},
    {"user", "ü 😀 \"q\" \\"},
    {"system", "Last"},
};

struct Expected {
  const char* name;
  bool add_assistant;
  bool edge_cases;
  const char* prompt;
};

const Expected kLlamaCpp[] = {
    {"llama3", false, false,
     "<|start_header_id|>system<|end_header_id|>\n\n"
     "You are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
     "Hello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
     "Hi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"},
    {"llama3", true, false,
     "<|start_header_id|>system<|end_header_id|>\n\n"
     "You are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
     "Hello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
     "Hi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
     "Who are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"chatml", false, false,
     "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
     "<|im_start|>assistant\n  Hi there  <|im_end|>\n<|im_start|>user\nWho are you?<|im_end|>\n"},
    {"chatml", true, false,
     "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
     "<|im_start|>assistant\n  Hi there  <|im_end|>\n<|im_start|>user\nWho are you?<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"phi3", false, false,
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\n"
     "  Hi there  <|end|>\n<|user|>\nWho are you?<|end|>\n"},
    {"phi3", true, false,
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\n"
     "  Hi there  <|end|>\n<|user|>\nWho are you?<|end|>\n<|assistant|>\n"},
    {"llama2", false, false,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n"
     "Hello [/INST]  Hi there  </s>[INST] Who are you? [/INST]"},
    {"llama2", true, false,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n"
     "Hello [/INST]  Hi there  </s>[INST] Who are you? [/INST]"},
    {"gemma", false, false,
     "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\n"
     "Hi there<end_of_turn>\n<start_of_turn>user\nWho are you?<end_of_turn>\n"},
    {"gemma", true, false,
     "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\n"
     "Hi there<end_of_turn>\n<start_of_turn>user\nWho are you?<end_of_turn>\n<start_of_turn>model\n"},
    {"llama3", false, true,
     "<|start_header_id|>system<|end_header_id|>\n\n"
     "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
     "<|eot_id|><|start_header_id|>system<|end_header_id|>\n\n"
     "Use English.<|eot_id|><|start_header_id|>system<|end_header_id|>\n\n"
     "And French<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
     "ü 😀 \"q\" \\<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nLast<|eot_id|>"},
    {"llama3", true, true,
     "<|start_header_id|>system<|end_header_id|>\n\n"
     "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
     "<|eot_id|><|start_header_id|>system<|end_header_id|>\n\n"
     "Use English.<|eot_id|><|start_header_id|>system<|end_header_id|>\n\n"
     "And French<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
     "ü 😀 \"q\" \\<|eot_id|><|start_header_id|>system<|end_header_id|>\n\n"
     "Last<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"chatml", false, true,
     "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\n  Hi\n<|im_end|>\n<|im_start|>assistant\n"
     "<|im_end|>\n<|im_start|>system\nUse English.<|im_end|>\n<|im_start|>system\n And French\t<|im_end|>\n"
     "<|im_start|>user\nü 😀 \"q\" \\<|im_end|>\n<|im_start|>system\nLast<|im_end|>\n"},
    {"chatml", true, true,
     "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\n  Hi\n<|im_end|>\n<|im_start|>assistant\n"
     "<|im_end|>\n<|im_start|>system\nUse English.<|im_end|>\n<|im_start|>system\n And French\t<|im_end|>\n"
     "<|im_start|>user\nü 😀 \"q\" \\<|im_end|>\n<|im_start|>system\nLast<|im_end|>\n<|im_start|>assistant\n"},
    {"phi3", false, true,
     "<|system|>\n Be brief. <|end|>\n<|user|>\n  Hi\n<|end|>\n<|assistant|>\n<|end|>\n<|system|>\n"
     "Use English.<|end|>\n<|system|>\n And French\t<|end|>\n<|user|>\nü 😀 \"q\" \\<|end|>\n<|system|>\n"
     "Last<|end|>\n"},
    {"phi3", true, true,
     "<|system|>\n Be brief. <|end|>\n<|user|>\n  Hi\n<|end|>\n<|assistant|>\n<|end|>\n<|system|>\n"
     "Use English.<|end|>\n<|system|>\n And French\t<|end|>\n<|user|>\nü 😀 \"q\" \\<|end|>\n<|system|>\n"
     "Last<|end|>\n<|assistant|>\n"},
    {"llama2", false, true,
     "[INST] <<SYS>>\n Be brief. \n<</SYS>>\n\n  Hi\n [/INST]</s>[INST] <<SYS>>\nUse English.\n<</SYS>>\n\n"
     "<<SYS>>\n And French\t\n<</SYS>>\n\nü 😀 \"q\" \\ [/INST]<<SYS>>\nLast\n<</SYS>>\n\n"},
    {"llama2", true, true,
     "[INST] <<SYS>>\n Be brief. \n<</SYS>>\n\n  Hi\n [/INST]</s>[INST] <<SYS>>\nUse English.\n<</SYS>>\n\n"
     "<<SYS>>\n And French\t\n<</SYS>>\n\nü 😀 \"q\" \\ [/INST]<<SYS>>\nLast\n<</SYS>>\n\n"},
    {"gemma", false, true,
     "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n<end_of_turn>\n"
     "<start_of_turn>user\nUse English.And French\n\nü 😀 \"q\" \\<end_of_turn>\n"},
    {"gemma", true, true,
     "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n<end_of_turn>\n"
     "<start_of_turn>user\nUse English.And French\n\nü 😀 \"q\" \\<end_of_turn>\n<start_of_turn>model\n"},
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no splitspec::Error thrown";
  return "";
}

TEST(ChatTemplate, NamesAreTheFiveBuiltIns) {
  EXPECT_EQ(chat_template_names(), (std::vector<std::string>{"llama3", "chatml", "phi3", "llama2", "gemma"}));
  for (const std::string& name : chat_template_names()) EXPECT_EQ(detect_chat_template(name), name);
}

TEST(ChatTemplate, PromptsAreLlamaCppsText) {
  for (const Expected& e : kLlamaCpp) {
    SCOPED_TRACE(std::string(e.name) + (e.add_assistant ? ", add_assistant" : "") +
                 (e.edge_cases ? ", edge cases" : ""));
    EXPECT_EQ(apply_chat_template(e.name, e.edge_cases ? kEdgeCases : kConversation, e.add_assistant), e.prompt);
  }
}

TEST(ChatTemplate, NoMessagesGiveOnlyTheHeaders) {
  EXPECT_EQ(apply_chat_template("chatml", {}, true), "<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template("chatml", {}, false), "");
  EXPECT_EQ(apply_chat_template("llama2", {}, true), "[INST] ");
}

// llama.cpp tests some families before ours, and a template naming theirs is
// theirs even when it also has our markers; its llama2 variants other than
// llama2-sys write differently from ours, so none of them is "llama2".
TEST(ChatTemplate, DetectsInLlamaCppsOrder) {
  const std::pair<const char*, std::optional<std::string>> cases[] = {
      {"{{ '<|im_start|>' + message['role'] + '\\n' }}", "chatml"},
      {"{{ '<|im_start|>' + message['role'] + '<|im_sep|>' }}", std::nullopt},  // Phi-4
      {"{{ '[INST] <<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' }}", "llama2"},
      {"{{ bos_token + '[INST] <<SYS>>\\n' }}", std::nullopt},      // llama2-sys-bos
      {"{{ '[INST] <<SYS>>\\n' + content.strip() }}", std::nullopt},  // llama2-sys-strip
      {"{{ '[INST] ' + message['content'] + ' [/INST]' }}", std::nullopt},  // llama2, no <<SYS>>
      {"{{ '[SYSTEM_PROMPT]' }}{{ '[INST]<<SYS>>' }}", std::nullopt},      // Mistral v7
      {"mistral", std::nullopt},
      {"{{ '<start_of_turn>' }}{{ '<|assistant|>' }}{{ '<|end|>' }}", "phi3"},
      {"{{ '<start_of_turn>' }}{{ '<|user|>' }}{{ '<|endoftext|>' }}", std::nullopt},  // Zephyr
      {"{{ '<|start_header_id|>' }}{{ '<|end_header_id|>' }}{{ '<start_of_turn>' }}", "gemma"},
      // Vicuna
      {"{{ '<|start_header_id|>' }}{{ '<|end_header_id|>' }}{{ 'USER: ' }}{{ 'ASSISTANT: ' }}", std::nullopt},
      {"{{ '<|system|>' }}", std::nullopt},
      {"phi4", std::nullopt},
  };
  for (const auto& [source, name] : cases) EXPECT_EQ(detect_chat_template(source), name) << source;
}

std::optional<std::string> read_template(const std::string& file) {
  std::ifstream in(std::string(SPLITSPEC_LLAMACPP_DIR "/src/models/templates/") + file, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ChatTemplate, DetectsLlamaCppsRealTemplates) {
  if (!read_template("Qwen-Qwen2.5-7B-Instruct.jinja"))
    GTEST_SKIP() << SPLITSPEC_LLAMACPP_DIR "/src/models/templates is absent"
                    " (scripts/setup_test_material.sh fetches it)";
  const std::pair<const char*, std::optional<std::string>> cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", "chatml"},
      {"Qwen-Qwen3-0.6B.jinja", "chatml"},
      {"Qwen-QwQ-32B.jinja", "chatml"},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "chatml"},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3"},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3"},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3"},
      {"microsoft-Phi-3.5-mini-instruct.jinja", "phi3"},
      {"google-gemma-2-2b-it.jinja", "gemma"},
      // Families llama.cpp recognizes but does not write as ours.
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", std::nullopt},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", std::nullopt},
      {"ibm-granite-granite-3.3-2B-Instruct.jinja", std::nullopt},
      {"openai-gpt-oss-120b.jinja", std::nullopt},
      // Families llama.cpp does not recognize.
      {"google-gemma-4-31B-it.jinja", std::nullopt},
      {"MiniMax-M2.jinja", std::nullopt},
  };
  for (const auto& [file, name] : cases) {
    SCOPED_TRACE(file);
    const std::optional<std::string> source = read_template(file);
    ASSERT_TRUE(source);
    EXPECT_EQ(detect_chat_template(*source), name);
    if (name) {
      EXPECT_EQ(apply_chat_template(*source, kConversation, true), apply_chat_template(*name, kConversation, true));
    }
  }
}

TEST(ChatTemplate, UnknownNameListsTheBuiltIns) {
  const std::string message = message_of([] { apply_chat_template("mistral-v7", kConversation, true); });
  EXPECT_NE(message.find("'mistral-v7'"), std::string::npos) << message;
  EXPECT_NE(message.find("llama3, chatml, phi3, llama2, gemma"), std::string::npos) << message;
}

TEST(ChatTemplate, UnmatchedTemplateSourceSuggestsAName) {
  const std::string message = message_of([] {
    apply_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}", kConversation, true);
  });
  EXPECT_NE(message.find("none of the built-in"), std::string::npos) << message;
  EXPECT_NE(message.find("--chat-template NAME"), std::string::npos) << message;
}

TEST(ChatTemplate, RefusesOtherRoles) {
  const std::string message = message_of([] { apply_chat_template("chatml", {{"user", "hi"}, {"tool", "42"}}, true); });
  EXPECT_NE(message.find("chat message 1 has role 'tool'"), std::string::npos) << message;
}

}  // namespace
}  // namespace splitspec::test

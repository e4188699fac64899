#pragma once
// Chat prompts written exactly as llama.cpp's llama_chat_apply_template writes
// them, so that a conversation reaches the model as the same text (and so the
// same ids) under SplitSpec and llama.cpp. Like llama.cpp's, these are fixed
// formats picked by name or recognized in a model's Jinja template by its
// markers, not a Jinja interpreter; five are built in, and a model family
// may register its own (register_chat_template).
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace splitspec {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// "llama3", "chatml" (Qwen 2, 2.5 and 3), "phi3", "llama2" (llama.cpp's
// "llama2-sys": a system message in <<SYS>>) and "gemma", then the
// registered ones.
std::vector<std::string> chat_template_names();

// The built-in template llama.cpp would pick for a model's
// tokenizer.chat_template (or a bare built-in name); none when llama.cpp
// would pick a family not built in here, or none at all.
std::optional<std::string> detect_chat_template(const std::string& jinja_source);

// The prompt for `messages`, ending with the assistant's header when
// `add_assistant` (llama2 has none: its prompt ends with the user's [/INST]).
// `name` is a built-in name or a model's Jinja source, as llama.cpp takes
// either. No BOS text: the tokenizer adds BOS, as llama.cpp's does. Throws
// splitspec::Error for an unknown name, a template source none of ours
// matches, or a role other than system, user and assistant.
std::string apply_chat_template(const std::string& name, const std::vector<ChatMessage>& messages,
                                bool add_assistant);

// The same prompt with the byte ranges (offset, length) the messages'
// content fills: text a user wrote, in which a tokenizer need not read
// special tokens (Tokenizer::tokenize's `literal`).
struct ChatPrompt {
  std::string text;
  std::vector<std::pair<size_t, size_t>> content;
};
ChatPrompt render_chat(const std::string& name, const std::vector<ChatMessage>& messages, bool add_assistant);

// A prompt as it is written: template text, and the messages' content,
// whose byte ranges are kept.
class ChatWriter {
 public:
  ChatWriter& tpl(const std::string& t) {
    out_.text += t;
    return *this;
  }
  ChatWriter& content(const std::string& c) {
    if (!c.empty()) out_.content.push_back({out_.text.size(), c.size()});
    out_.text += c;
    return *this;
  }
  ChatPrompt done() { return std::move(out_); }

 private:
  ChatPrompt out_;
};

// A template a model family adds (common/model/family.h): picked by its name
// or when `detect` finds its markers in a model's Jinja source (tested
// before the built-in ones). Throws splitspec::Error for a name taken.
struct ChatTemplateDef {
  std::string name;
  std::function<bool(const std::string& jinja_source)> detect;
  std::function<ChatPrompt(const std::vector<ChatMessage>&, bool add_assistant)> render;
};
void register_chat_template(ChatTemplateDef def);

}  // namespace splitspec

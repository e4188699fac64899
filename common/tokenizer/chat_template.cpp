#include "common/tokenizer/chat_template.h"

#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <mutex>
#include <string_view>

#include "common/util/error.h"

namespace splitspec {
namespace {

const char* const kNames[] = {"llama3", "chatml", "phi3", "llama2", "gemma"};

// Templates the model families add (register_chat_template).
struct Registered {
  std::mutex mu;
  std::vector<ChatTemplateDef> defs;
};

Registered& registered() {
  static auto* r = new Registered;
  return *r;
}

// The registered template named `name`, or (by_markers) whose markers
// `name` holds.
std::optional<ChatTemplateDef> find_registered(const std::string& name, bool by_markers) {
  Registered& r = registered();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const ChatTemplateDef& d : r.defs)
    if (name == d.name || (by_markers && d.detect(name))) return d;
  return std::nullopt;
}

std::string names_list() {
  std::string out;
  for (const std::string& name : chat_template_names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// llama.cpp trims with isspace in the C locale.
std::string trim(const std::string& s) {
  const char* const space = " \t\n\v\f\r";
  const size_t begin = s.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

using Writer = ChatWriter;

ChatPrompt llama3(const std::vector<ChatMessage>& messages, bool add_assistant) {
  Writer w;
  for (const ChatMessage& m : messages)
    w.tpl("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n").content(trim(m.content)).tpl("<|eot_id|>");
  if (add_assistant) w.tpl("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return w.done();
}

ChatPrompt chatml(const std::vector<ChatMessage>& messages, bool add_assistant) {
  Writer w;
  for (const ChatMessage& m : messages) w.tpl("<|im_start|>" + m.role + "\n").content(m.content).tpl("<|im_end|>\n");
  if (add_assistant) w.tpl("<|im_start|>assistant\n");
  return w.done();
}

ChatPrompt phi3(const std::vector<ChatMessage>& messages, bool add_assistant) {
  Writer w;
  for (const ChatMessage& m : messages) w.tpl("<|" + m.role + "|>\n").content(m.content).tpl("<|end|>\n");
  if (add_assistant) w.tpl("<|assistant|>\n");
  return w.done();
}

// The first [INST] is written before any message, so a system message opens
// the first turn; the assistant's header is the user's [/INST], hence no
// add_assistant.
ChatPrompt llama2(const std::vector<ChatMessage>& messages) {
  Writer w;
  w.tpl("[INST] ");
  bool in_turn = true;
  for (const ChatMessage& m : messages) {
    if (!in_turn) w.tpl("[INST] ");
    in_turn = true;
    if (m.role == "system") {
      w.tpl("<<SYS>>\n").content(m.content).tpl("\n<</SYS>>\n\n");
    } else if (m.role == "user") {
      w.content(m.content).tpl(" [/INST]");
    } else {
      w.content(m.content).tpl("</s>");
      in_turn = false;
    }
  }
  return w.done();
}

// Gemma has no system turn: system messages (trimmed and run together) open
// the next user turn instead; one with no user turn after it is dropped.
ChatPrompt gemma(const std::vector<ChatMessage>& messages, bool add_assistant) {
  Writer w;
  std::string system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system += trim(m.content);
      continue;
    }
    const bool model = m.role == "assistant";
    w.tpl(std::string("<start_of_turn>") + (model ? "model" : m.role) + "\n");
    if (!model && !system.empty()) {
      w.content(system).tpl("\n\n");
      system.clear();
    }
    w.content(trim(m.content)).tpl("<end_of_turn>\n");
  }
  if (add_assistant) w.tpl("<start_of_turn>model\n");
  return w.done();
}

bool looks_like_jinja(const std::string& s) {
  return s.find("{%") != std::string::npos || s.find("{{") != std::string::npos;
}

}  // namespace

std::vector<std::string> chat_template_names() {
  std::vector<std::string> names(std::begin(kNames), std::end(kNames));
  Registered& r = registered();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const ChatTemplateDef& d : r.defs) names.push_back(d.name);
  return names;
}

void register_chat_template(ChatTemplateDef def) {
  if (def.name.empty() || !def.detect || !def.render) throw Error("a chat template needs a name, markers and a form");
  Registered& r = registered();
  std::lock_guard<std::mutex> lock(r.mu);
  bool taken = std::find(std::begin(kNames), std::end(kNames), def.name) != std::end(kNames);
  for (const ChatTemplateDef& d : r.defs) taken |= d.name == def.name;
  if (taken) throw Error("chat template '" + def.name + "' is already registered");
  r.defs.push_back(std::move(def));
}

// llama.cpp's llm_chat_detect_template, in its order: families it tests
// before ours win over our markers in the same template (a Phi-4 template
// also has <|im_start|>), so they are tested here too and answer none.
std::optional<std::string> detect_chat_template(const std::string& jinja_source) {
  for (const char* name : kNames)
    if (jinja_source == name) return jinja_source;
  // A family's own template is tested first: its markers are its own.
  if (const auto def = find_registered(jinja_source, true)) return def->name;
  const auto has = [&](std::string_view s) { return jinja_source.find(s) != std::string::npos; };
  const auto has_all = [&](std::initializer_list<std::string_view> all) {
    for (std::string_view s : all)
      if (!has(s)) return false;
    return true;
  };
  if (has("<|im_start|>")) {
    if (has("<|im_sep|>") || has("<end_of_utterance>")) return std::nullopt;  // Phi-4, SmolVLM
    return "chatml";
  }
  if (jinja_source.rfind("mistral", 0) == 0 || has("[INST]")) {
    // Mistral's forms, and llama.cpp's llama2 variants that differ from
    // ours: without <<SYS>>, with <s> inside the history, or with stripped
    // messages (the one Llama 2 chat's own template gets).
    const bool mistral = has("[SYSTEM_PROMPT]") || has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]");
    if (mistral || !has("<<SYS>>") || has("bos_token + '[INST]") || has("content.strip()")) return std::nullopt;
    return "llama2";
  }
  if (has_all({"<|assistant|>", "<|end|>"})) return "phi3";
  // ChatGLM 4, EXAONE/Falcon 3/GLM-Edge, GLM-Edge, Zephyr, Monarch.
  if (has("[gMASK]<sop>") || has_all({"<|assistant|>", "<|user|>"}) ||
      has_all({"<|{{ item['role'] }}|>", "<|begin_of_image|>"}) || has_all({"<|user|>", "<|endoftext|>"}) ||
      has("bos_token + message['role']"))
    return std::nullopt;
  if (has("<start_of_turn>")) return "gemma";
  // Orion, OpenChat, Vicuna, DeepSeek Coder, Command R.
  if (has("'\\n\\nAssistant: ' + eos_token") || has("GPT4 Correct ") || has_all({"USER: ", "ASSISTANT: "}) ||
      has_all({"### Instruction:", "<|EOT|>"}) || has_all({"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"}))
    return std::nullopt;
  if (has_all({"<|start_header_id|>", "<|end_header_id|>"})) return "llama3";
  return std::nullopt;
}

ChatPrompt render_chat(const std::string& name, const std::vector<ChatMessage>& messages, bool add_assistant) {
  const std::optional<std::string> found = detect_chat_template(name);
  if (!found && looks_like_jinja(name))
    throw Error("the model's chat template is none of the built-in ones (" + names_list() +
                "); pass --chat-template NAME with the one its prompts follow");
  if (!found) throw Error("unknown chat template '" + name + "'; the built-in ones are " + names_list());
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant")
      throw Error("chat message " + std::to_string(i) + " has role '" + role +
                  "'; the roles are system, user and assistant");
  }
  if (const auto def = find_registered(*found, false)) return def->render(messages, add_assistant);
  if (*found == "llama3") return llama3(messages, add_assistant);
  if (*found == "chatml") return chatml(messages, add_assistant);
  if (*found == "phi3") return phi3(messages, add_assistant);
  if (*found == "llama2") return llama2(messages);
  return gemma(messages, add_assistant);
}

std::string apply_chat_template(const std::string& name, const std::vector<ChatMessage>& messages,
                                bool add_assistant) {
  return render_chat(name, messages, add_assistant).text;
}

}  // namespace splitspec

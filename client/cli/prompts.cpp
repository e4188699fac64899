#include "client/cli/prompts.h"

#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/tokenizer/tokenizer.h"
#include "common/util/error.h"

namespace splitspec::cli {

std::vector<PromptRecord> read_prompt_records(const std::string& path, int32_t max) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open prompts file");
  std::vector<PromptRecord> out;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line) && (max <= 0 || static_cast<int32_t>(out.size()) < max)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ":" + std::to_string(lineno) + ": not valid JSON: " + e.what());
    }
    if (!j.is_object()) throw Error(path + ":" + std::to_string(lineno) + ": each line must be a JSON object");
    const std::string category = j.contains("category") && j["category"].is_string() ? j["category"].get<std::string>() : "";
    const std::string where = path + ":" + std::to_string(lineno);
    if (j.contains("turns") && j["turns"].is_array() && !j["turns"].empty() && j["turns"][0].is_string()) {
      out.push_back({j["turns"][0].get<std::string>(), {}, category});
    } else if (j.contains("prompt") && j["prompt"].is_string()) {
      out.push_back({j["prompt"].get<std::string>(), {}, category});
    } else if (j.contains("text") && j["text"].is_string()) {
      out.push_back({j["text"].get<std::string>(), {}, category});
    } else if (j.contains("prompt_ids") && j["prompt_ids"].is_array() && !j["prompt_ids"].empty()) {
      PromptRecord r{{}, {}, category};
      for (const auto& id : j["prompt_ids"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
          throw Error(where + ": prompt_ids must be non-negative integers");
        r.ids.push_back(id.get<int32_t>());
      }
      out.push_back(std::move(r));
    } else {
      throw Error(where + ": needs \"turns\": [text, ...], \"prompt\": text or \"prompt_ids\": [ids]");
    }
  }
  if (out.empty()) throw Error(path + ": no prompts");
  return out;
}

std::vector<std::string> read_prompts(const std::string& path, int32_t max) {
  std::vector<std::string> out;
  for (PromptRecord& r : read_prompt_records(path, max)) {
    if (!r.ids.empty())
      throw Error(path + ": this command takes text prompts (\"prompt\" or \"turns\"), not \"prompt_ids\"");
    out.push_back(std::move(r.text));
  }
  return out;
}

std::vector<std::vector<int32_t>> encode_prompts(const std::vector<std::string>& texts, const Tokenizer& tok,
                                                 int64_t keep) {
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& t : texts) {
    std::vector<int32_t> ids = tok.encode(t);
    ids.insert(ids.begin(), tok.bos_id());
    if (static_cast<int64_t>(ids.size()) > keep) ids.erase(ids.begin() + 1, ids.end() - (keep - 1));
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

}  // namespace splitspec::cli

// Parity with a real public checkpoint: stories260K's greedy reference
// outputs, produced by an independent implementation, reproduced exactly.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/test_util.h"

namespace splitspec::test {

TEST(Stories260KParity, GreedyOutputsMatchEveryReferenceLine) {
  const auto shared = shared_dir();
  if (!shared) GTEST_SKIP() << "../shared is absent: stories260K parity not checked";
  const auto dir = *shared / "models" / "stories260K";
  auto model = Model::load(dir.string());
  Tokenizer tok(dir.string());
  std::ifstream in(dir / "reference.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto ref = nlohmann::json::parse(line);
    const std::string prompt = ref["prompt"];
    const auto prompt_ids = ref["prompt_ids"].get<std::vector<int32_t>>();
    const auto greedy = ref["greedy_ids"].get<std::vector<int32_t>>();

    std::vector<int32_t> encoded = tok.encode(prompt);
    encoded.insert(encoded.begin(), static_cast<int32_t>(model->config().bos_token_id));
    EXPECT_EQ(encoded, prompt_ids) << "tokenizer disagrees on: " << prompt;

    GenerateOptions o;
    o.max_new_tokens = static_cast<int32_t>(greedy.size());
    o.ignore_eos = true;
    const Reference g = target_alone(*model, prompt_ids, o);
    EXPECT_EQ(g.output_ids, greedy) << "prompt: " << prompt;

    std::vector<int32_t> all = prompt_ids;
    all.insert(all.end(), greedy.begin(), greedy.end());
    EXPECT_EQ(tok.decode(all), ref["text"].get<std::string>());
    ++lines;
  }
  EXPECT_GE(lines, 1);
  std::cout << "[ stories260K: " << lines << " reference lines reproduced ]\n";
}

}  // namespace splitspec::test

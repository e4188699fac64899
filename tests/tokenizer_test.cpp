// The tokenizer's streaming decode (tokenizer_backends_test.cpp compares its
// two SentencePiece backends).
#include <gtest/gtest.h>

#include "common/tokenizer/tokenizer.h"
#include "tests/test_util.h"

namespace splitspec::test {

TEST(Tokenizer, StreamingDecodeEqualsWholeDecode) {
  const auto shared = shared_dir();
  if (!shared) GTEST_SKIP() << "../shared is absent: tokenizer streaming not checked";
  Tokenizer tok((*shared / "models" / "stories260K").string());
  // Includes non-ASCII text, which this 512-piece vocabulary spells in byte pieces.
  const std::string text = "Lily said: \"naïve café — 猫!\"\nThe end.";
  std::vector<int32_t> ids = tok.encode(text);
  std::vector<int32_t> ctx = {1, ids[0]};
  TextStreamer s(tok, ctx);
  std::string streamed;
  for (size_t i = 1; i < ids.size(); ++i) streamed += s.push(ids[i]);
  streamed += s.finish();
  EXPECT_EQ(tok.decode(ctx) + streamed, tok.decode(std::vector<int32_t>{1}) + text);
  EXPECT_EQ(streamed.find("\xEF\xBF\xBD"), std::string::npos) << "no replacement characters while streaming";
}

}  // namespace splitspec::test

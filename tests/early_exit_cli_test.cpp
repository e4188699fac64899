// The CLI's early-exit commands as a user runs them (the splitspec
// binary): ranking the shortlist of existing exits, and the evaluation table
// and plot.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "common/early_exit/early_exit.h"
#include "tests/test_util.h"

namespace splitspec {
namespace {

using test::TempDir;

// Exits trained before they carried a ranking get one from the CLI, adapters
// untouched; a model without exits is a clear error.
TEST(EarlyExitsCli, ShortlistRanksTheVocabularyOfExistingExits) {
  TempDir dir, target;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.model", "early_exits.safetensors"})
    std::filesystem::copy_file(std::filesystem::path(test::demo_target_dir()) / f, target.path() / f);
  auto model = Model::load(test::demo_target_dir());
  EarlyExits plain = *EarlyExits::load(test::demo_target_dir(), model->config());
  plain.set_frequent_tokens({}, model->config().vocab_size);
  plain.save(target.str());
  std::string text;
  for (int i = 0; i < 50; ++i) text += "Call me Ishmael. Some years ago, never mind how long precisely.\n\n";
  test::write_file(dir.path() / "text.txt", text);
  const std::string bin = std::string(SPLITSPEC_BIN_DIR) + "/splitspec train shortlist --corpus " + dir.str("text.txt");
  const std::string out = dir.str("out.txt"), err = dir.str("err.txt");
  ASSERT_EQ(std::system((bin + " --target " + target.str() + " >" + out + " 2>" + err).c_str()), 0) << test::read_file(err);
  EXPECT_NE(test::read_file(out).find("ranked"), std::string::npos);
  const auto back = EarlyExits::load(target.str(), model->config());
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(back->frequent_tokens().empty());
  EXPECT_TRUE(back->adapters()[2].up == plain.adapters()[2].up);

  TempDir bare;
  Model::random(test::tiny_config(), 1)->save(bare.str());
  EXPECT_NE(std::system((bin + " --target " + bare.str() + " >/dev/null 2>" + err).c_str()), 0);
  EXPECT_NE(test::read_file(err).find("no early_exits.json"), std::string::npos) << test::read_file(err);
}

TEST(EarlyExitsCli, EvalPrintsTheTableAndDrawsThePlot) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 200; ++i) text += "It was the best of times, it was the worst of times.\n\n";
  test::write_file(dir.path() / "text.txt", text);
  const std::string out = dir.str("out.txt"), err = dir.str("err.txt"), svg = dir.str("exits.svg");
  const std::string cmd = std::string(SPLITSPEC_BIN_DIR) + "/splitspec eval exits --model " + test::demo_target_dir() +
                          " --text " + dir.str("text.txt") + " --seq-len 64 --windows 4 --threads 1 --plot " + svg +
                          " >" + out + " 2>" + err;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << test::read_file(err);
  const std::string table = test::read_file(out);
  for (int l = 1; l <= 7; ++l) EXPECT_NE(table.find("| " + std::to_string(l) + " of 8 |"), std::string::npos) << table;
  const std::string plot = test::read_file(svg);
  EXPECT_EQ(plot.rfind("<svg", 0), 0u);
  EXPECT_NE(plot.find("match rate"), std::string::npos);
  // A model without exits is a clear error.
  TempDir bare;
  Model::random(test::tiny_config(), 1)->save(bare.str());
  const std::string bad = std::string(SPLITSPEC_BIN_DIR) + "/splitspec eval exits --model " + bare.str() + " --text " +
                          dir.str("text.txt") + " >/dev/null 2>" + err;
  EXPECT_NE(std::system(bad.c_str()), 0);
  EXPECT_NE(test::read_file(err).find("no early_exits.json"), std::string::npos) << test::read_file(err);
}

}  // namespace
}  // namespace splitspec

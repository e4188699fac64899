// A text prompt against a server with no tokenizer here: the client fetches
// the target's (GetTokenizer), checks it against the fingerprint, keeps it
// named by the fingerprint and reads it from there next time; a broken
// cached copy is fetched again; a server with no tokenizer gets a text
// prompt an error that names --tokenizer.
#include "client/tokenizer_fetch.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "client/client.h"
#include "client/server_link.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/edge_cloud_util.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

ClientOptions tokenizer_less(const std::string& address) {
  ClientOptions o = server_options(address, "none");
  o.draft_dir.clear();
  return o;
}

Request greedy(int n) {
  Request r;
  r.max_new_tokens = n;
  r.ignore_eos = true;
  return r;
}

}  // namespace

TEST(TokenizerFetch, TextPromptsWithNoTokenizerHereUseTheServersKeptByFingerprint) {
  TempDir cache;
  ::setenv("SPLITSPEC_CACHE_DIR", cache.str().c_str(), 1);
  LocalServer srv = start_server(demo_target_dir());
  const std::string fp = Tokenizer(demo_target_dir()).fingerprint();
  const std::filesystem::path kept = cache.path() / "tokenizers" / (fp + ".gguf");

  // The text and ids a client with the target's tokenizer gets.
  ClientOptions with = tokenizer_less(srv.address);
  with.tokenizer = demo_target_dir();
  const Result want = Client::connect(with)->generate("Once upon a time", greedy(16));

  const Result got = Client::connect(tokenizer_less(srv.address))->generate("Once upon a time", greedy(16));
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.text, want.text);
  ASSERT_TRUE(std::filesystem::exists(kept));
  EXPECT_EQ(Tokenizer(kept.string()).fingerprint(), fp);

  // Next time from the cache: the file is not written again.
  const auto written = std::filesystem::last_write_time(kept);
  EXPECT_EQ(Client::connect(tokenizer_less(srv.address))->generate("Once upon a time", greedy(16)).ids, want.ids);
  EXPECT_EQ(std::filesystem::last_write_time(kept), written);

  // A damaged copy is fetched again, not trusted.
  write_file(kept, "GGUF not really");
  EXPECT_EQ(Client::connect(tokenizer_less(srv.address))->generate("Once upon a time", greedy(16)).text, want.text);
  EXPECT_EQ(Tokenizer(kept.string()).fingerprint(), fp);

  // The link's own call, as a robot's first connect makes it.
  ServerLink link(srv.address, std::chrono::seconds(5));
  TempDir other;
  const std::string path = fetch_server_tokenizer(link, other.str(), std::chrono::seconds(10));
  EXPECT_EQ(Tokenizer(path).encode("The robot picked up the red block."),
            Tokenizer(demo_target_dir()).encode("The robot picked up the red block."));
  ::unsetenv("SPLITSPEC_CACHE_DIR");
}

TEST(TokenizerFetch, AServerWithNoTokenizerLeavesIdsWorkingAndNamesTheFlag) {
  TempDir dir, cache;
  ::setenv("SPLITSPEC_CACHE_DIR", cache.str().c_str(), 1);
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(std::filesystem::path(demo_target_dir()) / f, dir.path() / f);
  LocalServer srv = start_server(dir.str());
  auto client = Client::connect(tokenizer_less(srv.address));
  EXPECT_EQ(client->generate_ids({1, 4274, 824}, greedy(4)).ids.size(), 4u);
  const std::string err = error_of([&] { client->generate("Once upon a time", greedy(4)); });
  EXPECT_NE(err.find("--tokenizer PATH"), std::string::npos) << err;
  EXPECT_NE(err.find("ships no tokenizer"), std::string::npos) << err;
  ::unsetenv("SPLITSPEC_CACHE_DIR");
}

}  // namespace splitspec::test

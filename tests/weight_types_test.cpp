// Exactness at every weight type: the demo pair converted to F32, BF16, Q8_0
// and Q4_0 (F16 is how it ships, covered by every other test), and each mode
// on it, locally (in memory and streamed) and over real gRPC, gives exactly
// the greedy tokens of the converted target alone; with an F16 KV cache too.
#include <gtest/gtest.h>

#include <filesystem>

#include "client/client.h"
#include "common/model/model.h"
#include "server/server.h"
#include "tests/edge_cloud_util.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

namespace fs = std::filesystem;

// The demo target (with its drafters' files) and draft at `type`.
void convert_pair(WType type, const TempDir& dir) {
  for (const auto& [src, name] : {std::pair{demo_target_dir(), "target"}, std::pair{demo_draft_dir(), "draft"}}) {
    Model::load(src, type)->save(dir.str(name));
    for (const auto& f : fs::directory_iterator(src)) {
      const std::string file = f.path().filename().string();
      if (file != "model.safetensors" && file != "config.json")
        fs::copy_file(f.path(), fs::path(dir.str(name)) / file, fs::copy_options::overwrite_existing);
    }
  }
}

std::vector<int32_t> run(const ClientOptions& o, const std::vector<int32_t>& prompt, const Request& req) {
  return Client::connect(o)->generate_ids(prompt, req).ids;
}

Request greedy_request() {
  Request req;
  req.max_new_tokens = 24;
  req.ignore_eos = true;
  req.gamma = 3;
  return req;
}

// Two test prompts and the target's own greedy tokens for them, with a KV
// cache of `kv_cache` ("" for the default).
struct Expected {
  std::vector<std::vector<int32_t>> prompts, want;
};
Expected expected_tokens(const std::string& target, const std::string& kv_cache, const Request& req) {
  const Tokenizer tok(target);
  ClientOptions alone;
  alone.verifier = VerifierKind::kLocal;
  alone.target_dir = target;
  alone.drafter = "none";
  alone.kv_cache = kv_cache;
  Expected e;
  for (int p = 0; p < 2; ++p) {
    e.prompts.push_back(encode_prompt(tok, test_prompts()[p]));
    e.want.push_back(run(alone, e.prompts.back(), req));
  }
  return e;
}

}  // namespace

class WeightTypes : public ::testing::TestWithParam<WType> {};

TEST_P(WeightTypes, EveryModeGivesTheTargetsGreedyTokens) {
  const WType type = GetParam();
  TempDir dir;
  convert_pair(type, dir);
  const std::string target = dir.str("target"), draft = dir.str("draft");
  ASSERT_EQ(Model::load(target)->weight_type(), type);
  const Request req = greedy_request();
  const auto [prompts, want] = expected_tokens(target, "", req);
  LocalServer srv = start_server(target);
  struct Case {
    std::string name;
    std::string drafter;
    bool server = false, predraft = false;
    std::string budget = {};
  };
  const std::vector<Case> cases = {
      {"local-sd", "model"},          {"local-tree", "model-tree"},       {"local-tree 25%", "model-tree", false, false, "25%"},
      {"local pld", "pld"},           {"local lut", "lut"},               {"local recurrent", "recurrent"},
      {"local recurrent 25%", "recurrent", false, false, "25%"},
      {"cloud-ar", "none", true},     {"edge-sd", "model", true},         {"edge-fsd", "model", true, true},
      {"server model-tree", "model-tree", true}, {"server recurrent", "recurrent", true},
  };
  for (const Case& c : cases) {
    ClientOptions o = with_verifier(ClientOptions{}, c.server ? srv.address : "", target);
    o.drafter = c.drafter;
    o.predraft = c.predraft;
    o.memory_budget = c.budget;
    if (c.drafter == "model" || c.drafter == "model-tree") o.draft_dir = draft;
    if (c.drafter == "lut") o.drafter_options["tables"] = target + "/lut.safetensors";
    if (c.server) o.tokenizer = target;
    for (size_t p = 0; p < prompts.size(); ++p)
      EXPECT_EQ(run(o, prompts[p], req), want[p]) << wtype_name(type) << " " << c.name << ", prompt " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(DemoPair, WeightTypes, ::testing::Values(WType::F32, WType::BF16, WType::Q8_0, WType::Q4_0),
                         [](const auto& info) { return std::string(wtype_name(info.param)); });

// With an F16 KV cache (kv_cache.h) every mode, locally and over real gRPC
// with the server's kv_cache set, gives exactly the greedy tokens of the
// target alone with that cache: as shipped (F16) and at Q4_0.
class HalfKVCache : public ::testing::TestWithParam<WType> {};

TEST_P(HalfKVCache, EveryModeGivesTheTargetsGreedyTokens) {
  const WType type = GetParam();
  TempDir dir;
  convert_pair(type, dir);
  const std::string target = dir.str("target"), draft = dir.str("draft");
  const Request req = greedy_request();
  const auto [prompts, want] = expected_tokens(target, "f16", req);
  ServerConfig sc;
  sc.target_dir = target;
  sc.listen = "127.0.0.1:0";
  sc.compute_threads = 1;
  sc.log_level = "warn";
  sc.kv_cache = "f16";
  Server server(sc);
  server.start();
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  struct Case {
    std::string name, drafter;
    bool server = false, predraft = false;
    std::string budget = {};
  };
  const std::vector<Case> cases = {
      {"local-sd", "model"},         {"local-tree 25%", "model-tree", false, false, "25%"},
      {"local lut", "lut"},          {"local recurrent", "recurrent"},
      {"cloud-ar", "none", true},    {"edge-sd", "model", true},
      {"edge-fsd", "model", true, true}, {"server model-tree", "model-tree", true},
  };
  for (const Case& c : cases) {
    ClientOptions o = with_verifier(ClientOptions{}, c.server ? address : "", target);
    o.drafter = c.drafter;
    o.predraft = c.predraft;
    o.memory_budget = c.budget;
    if (!c.server) o.kv_cache = "f16";
    if (c.drafter == "model" || c.drafter == "model-tree") o.draft_dir = draft;
    if (c.drafter == "lut") o.drafter_options["tables"] = target + "/lut.safetensors";
    if (c.server) o.tokenizer = target;
    for (size_t p = 0; p < prompts.size(); ++p)
      EXPECT_EQ(run(o, prompts[p], req), want[p]) << wtype_name(type) << " " << c.name << ", prompt " << p;
  }
  ClientOptions o = with_verifier(ClientOptions{}, address, target);
  o.drafter = "none";
  o.tokenizer = target;
  EXPECT_EQ(Client::connect(o)->server_info().kv_cache, "f16");
  server.shutdown();
}

INSTANTIATE_TEST_SUITE_P(DemoPair, HalfKVCache, ::testing::Values(WType::F16, WType::Q4_0),
                         [](const auto& info) { return std::string(wtype_name(info.param)); });

}  // namespace splitspec::test

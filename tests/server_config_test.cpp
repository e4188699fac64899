// splitspec-server's configuration file: the shipped one parses, bad ones
// are refused naming the key, and configs/README.md documents every option
// with its default.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <sstream>
#include <utility>

#include "common/util/error.h"
#include "server/server_config.h"
#include "tests/test_util.h"

namespace splitspec {
namespace {

using test::TempDir;

std::string config_error(const std::string& json) {
  TempDir dir;
  test::write_file(dir.path() / "server.json", json);
  try {
    ServerConfig::from_file(dir.str("server.json"));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ServerConfig, ShippedConfigParsesAndBadOnesAreNamed) {
  const ServerConfig c = ServerConfig::from_file(std::string(SPLITSPEC_SOURCE_DIR) + "/configs/server.json");
  EXPECT_EQ(c.target_dir, "models/demo-target");
  EXPECT_EQ(c.max_sessions, 8);
  EXPECT_EQ(c.max_verdict_top_k, 16);
  EXPECT_EQ(c.compute_threads, ServerConfig{}.compute_threads) << "the shipped config keeps the default";
  // Each bad file and what its error must say.
  const std::pair<const char*, const char*> refused[] = {
      {"{\"max_verdict_top_k\": 300}", "max_verdict_top_k must be in [0, 256]"},
      {"{\"max_sessions\": ", "not valid JSON"},
      {"[1]", "must be a JSON object"},
      {"{\"max_sesions\": 3}", "unknown key 'max_sesions'"},
      {"{\"max_sessions\": \"many\"}", "server.json"},
      {"{\"max_sessions\": 0}", "max_sessions must be at least 1"},
      // Found by scripts/fuzz.sh: a float beyond an integer's range is refused, not converted.
      {"{\"max_sessions\": 3.3e102}", "max_sessions must be an integer"},
      {"{\"max_sessions\": 2.5}", "must be an integer"},
      {"{\"early_exit_layers\": [4, 1e300]}", "early_exit_layers must be an integer"},
      {"{\"max_batch_rows\": 4294967296}", "server.json: max_batch_rows"},
      {"{\"listen\": \"nowhere\"}", "HOST:PORT"},
      {"{\"log_level\": \"loud\"}", "log_level"},
      {"{\"shutdown_grace_s\": -1}", "shutdown_grace_s"},
      {"{\"max_message_bytes\": 10}", "max_message_bytes"},
      {"{\"max_concurrent_streams\": 0}", "max_concurrent_streams"},
      {"{\"max_connection_idle_s\": 0}", "max_connection_idle_s"},
      {"{\"max_ping_strikes\": 0}", "max_ping_strikes"},
      {"{\"max_rpc_threads\": 1}", "max_rpc_threads"},
      {"{\"http_listen\": \"8080\"}", "http_listen must be HOST:PORT"},
      // The HTTP door is never weaker than the gRPC door unless the operator says TLS ends upstream.
      {"{\"http_listen\": \"0.0.0.0:8080\", \"auth_tokens_file\": \"t\"}", "plaintext HTTP"},
      {"{\"http_listen\": \"0.0.0.0:8080\", \"http_tls\": \"upstream\"}",
       "http_tls is upstream but the gRPC port has no TLS"},
      {"{\"http_tls\": \"sideways\"}", "http_tls must be same"},
      {"{\"http_request_timeout_s\": 0}", "http_request_timeout_s"},
      {"{\"http_send_timeout_s\": -1}", "http_send_timeout_s"},
      {"{\"http_max_connections\": 0}", "http_max_connections"},
      {"{\"trusted_proxies\": \"10.0.0.1\"}", "trusted_proxies must be an array"},
      {"{\"chat_template\": \"jinja\"}", "chat_template must be a built-in"},
      {"{\"session_idle_timeout_s\": -1}", "session_idle_timeout_s"},
      {"{\"emulate_forward_ms\": \"fast\"}", "server.json: emulate_forward_ms 'fast'"},
      {"{\"emulate_forward_ms\": -5}", "emulate_forward_ms"},
  };
  for (const auto& [json, says] : refused) EXPECT_NE(config_error(json).find(says), std::string::npos) << json;
}

// configs/README.md's table of server.json keys against server_options.inc,
// where each option is declared once: every key documented once, with the
// default the code has, and none the code lacks.
TEST(ServerConfig, ReadmeTableListsEveryOptionWithItsDefault) {
  std::istringstream readme(test::read_file(std::string(SPLITSPEC_SOURCE_DIR) + "/configs/README.md"));
  std::map<std::string, std::string> documented;  // key -> default, as written
  bool in_table = false;
  for (std::string line; std::getline(readme, line);) {
    if (line == "| key | default | meaning |") {
      in_table = true;
      continue;
    }
    if (!in_table || line.rfind("|---", 0) == 0) continue;
    if (line.empty() || line[0] != '|') break;
    // Cells split at unescaped bars (a meaning may hold \|).
    std::vector<std::string> cells(1);
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '|' && line[i - 1] != '\\')
        cells.emplace_back();
      else
        cells.back() += line[i];
    }
    ASSERT_GE(cells.size(), 3u) << line;
    std::string value = cells[1];
    value.erase(std::remove(value.begin(), value.end(), '`'), value.end());
    value.erase(0, value.find_first_not_of(' '));
    value.erase(value.find_last_not_of(' ') + 1);
    if (value.rfind("(none", 0) == 0) value = "";
    std::regex key_re("`([a-z_0-9]+)`");
    for (auto m = std::sregex_iterator(cells[0].begin(), cells[0].end(), key_re); m != std::sregex_iterator(); ++m) {
      EXPECT_FALSE(documented.count((*m)[1])) << (*m)[1] << " is documented twice";
      documented[(*m)[1]] = value;
    }
  }
  const std::vector<ServerOptionInfo> options = server_options();
  for (const ServerOptionInfo& o : options) {
    ASSERT_TRUE(documented.count(o.key)) << o.key << " is missing from configs/README.md";
    EXPECT_EQ(documented[o.key], o.default_text) << o.key << "'s default in configs/README.md";
    documented.erase(o.key);
  }
  for (const auto& [key, value] : documented) ADD_FAILURE() << key << " is in configs/README.md but no option";
}

}  // namespace
}  // namespace splitspec

// splitspec-server's configuration file: the shipped one parses, bad ones
// are refused naming the key, and configs/README.md documents every option
// with its default.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <sstream>

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
  EXPECT_NE(config_error("{\"max_verdict_top_k\": 300}").find("max_verdict_top_k must be in [0, 256]"), std::string::npos);
  EXPECT_NE(config_error("{\"max_sessions\": ").find("not valid JSON"), std::string::npos);
  EXPECT_NE(config_error("[1]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(config_error("{\"max_sesions\": 3}").find("unknown key 'max_sesions'"), std::string::npos);
  EXPECT_NE(config_error("{\"max_sessions\": \"many\"}").find("server.json"), std::string::npos);
  EXPECT_NE(config_error("{\"max_sessions\": 0}").find("max_sessions must be at least 1"), std::string::npos);
  // Found by scripts/fuzz.sh: a float beyond an integer's range is refused, not converted.
  EXPECT_NE(config_error("{\"max_sessions\": 3.3e102}").find("max_sessions must be an integer"), std::string::npos);
  EXPECT_NE(config_error("{\"max_sessions\": 2.5}").find("must be an integer"), std::string::npos);
  EXPECT_NE(config_error("{\"early_exit_layers\": [4, 1e300]}").find("early_exit_layers must be an integer"),
            std::string::npos);
  EXPECT_NE(config_error("{\"max_batch_rows\": 4294967296}").find("server.json: max_batch_rows"), std::string::npos);
  EXPECT_NE(config_error("{\"listen\": \"nowhere\"}").find("HOST:PORT"), std::string::npos);
  EXPECT_NE(config_error("{\"log_level\": \"loud\"}").find("log_level"), std::string::npos);
  EXPECT_NE(config_error("{\"shutdown_grace_s\": -1}").find("shutdown_grace_s"), std::string::npos);
  EXPECT_NE(config_error("{\"max_message_bytes\": 10}").find("max_message_bytes"), std::string::npos);
  EXPECT_NE(config_error("{\"max_concurrent_streams\": 0}").find("max_concurrent_streams"), std::string::npos);
  EXPECT_NE(config_error("{\"max_connection_idle_s\": 0}").find("max_connection_idle_s"), std::string::npos);
  EXPECT_NE(config_error("{\"max_ping_strikes\": 0}").find("max_ping_strikes"), std::string::npos);
  EXPECT_NE(config_error("{\"max_rpc_threads\": 1}").find("max_rpc_threads"), std::string::npos);
  EXPECT_NE(config_error("{\"http_listen\": \"8080\"}").find("http_listen must be HOST:PORT"), std::string::npos);
  // The HTTP door is never weaker than the gRPC door unless the operator says TLS ends upstream.
  EXPECT_NE(config_error("{\"http_listen\": \"0.0.0.0:8080\", \"auth_tokens_file\": \"t\"}").find("plaintext HTTP"),
            std::string::npos);
  EXPECT_NE(config_error("{\"http_listen\": \"0.0.0.0:8080\", \"http_tls\": \"upstream\"}")
                .find("http_tls is upstream but the gRPC port has no TLS"),
            std::string::npos);
  EXPECT_NE(config_error("{\"http_tls\": \"sideways\"}").find("http_tls must be same"), std::string::npos);
  EXPECT_NE(config_error("{\"http_request_timeout_s\": 0}").find("http_request_timeout_s"), std::string::npos);
  EXPECT_NE(config_error("{\"http_send_timeout_s\": -1}").find("http_send_timeout_s"), std::string::npos);
  EXPECT_NE(config_error("{\"http_max_connections\": 0}").find("http_max_connections"), std::string::npos);
  EXPECT_NE(config_error("{\"trusted_proxies\": \"10.0.0.1\"}").find("trusted_proxies must be an array"),
            std::string::npos);
  EXPECT_NE(config_error("{\"chat_template\": \"jinja\"}").find("chat_template must be a built-in"), std::string::npos);
  EXPECT_NE(config_error("{\"session_idle_timeout_s\": -1}").find("session_idle_timeout_s"), std::string::npos);
  EXPECT_NE(config_error("{\"emulate_forward_ms\": \"fast\"}").find("server.json: emulate_forward_ms 'fast'"),
            std::string::npos);
  EXPECT_NE(config_error("{\"emulate_forward_ms\": -5}").find("emulate_forward_ms"), std::string::npos);
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

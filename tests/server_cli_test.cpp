// splitspec-server's configuration and the CLI's server modes, as a user
// meets them: clear errors, documented flags, the JSON stats contract.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "common/util/error.h"
#include "server/server_config.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

using test::TempDir;

struct ProcessRun {
  int status;
  std::string out, err;
};

ProcessRun run(const std::string& binary, const std::string& args) {
  TempDir tmp;
  const std::string cmd = std::string(SPLITSPEC_BIN_DIR) + "/" + binary + " " + args + " >" + tmp.str("out") + " 2>" + tmp.str("err");
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, test::read_file(tmp.path() / "out"), test::read_file(tmp.path() / "err")};
}

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

// Every option is a flag (its key with dashes, unless the table names
// others), listed by --help with its default, and a flag overrides the
// file's value.
TEST(ServerCli, EveryOptionIsAFlagThatOverridesTheFile) {
  const ProcessRun help = run("splitspec-server", "--help");
  ASSERT_EQ(help.status, 0);
  for (const ServerOptionInfo& o : server_options()) {
    const size_t at = help.out.find("  " + o.flags + " ");
    ASSERT_NE(at, std::string::npos) << o.flags;
    if (!o.default_text.empty() && o.default_text != "[]" && o.default_text != "false") {
      EXPECT_NE(help.out.substr(at, o.flags.size() + 40).find("=" + o.default_text), std::string::npos)
          << o.flags << " shows its default " << o.default_text;
    }
  }
  TempDir dir;
  test::write_file(dir.path() / "server.json", "{\"max_sessions\": 3, \"kv_cache\": \"f16\", \"batching\": false}");
  const ProcessRun flag_wins = run("splitspec-server", "--check-config --target " + test::demo_target_dir() +
                                                          " --config " + dir.str("server.json") + " --max-sessions 0");
  EXPECT_EQ(flag_wins.status, 1);
  EXPECT_NE(flag_wins.err.find("max_sessions must be at least 1"), std::string::npos) << flag_wins.err;
  const ProcessRun both = run("splitspec-server", "--check-config --target " + test::demo_target_dir() + " --config " +
                                                     dir.str("server.json") + " --kv-cache q8_0");
  EXPECT_EQ(both.status, 1);
  EXPECT_NE(both.err.find("kv_cache must be f32 or f16, got 'q8_0'"), std::string::npos) << both.err;
}

TEST(ServerCli, BadStartsExitWithOneClearLine) {
  TempDir dir;
  test::write_file(dir.path() / "bad.json", "{\"listen\": 5}");
  const std::string demo = test::demo_target_dir();
  const struct {
    std::string args, message;
  } cases[] = {
      {"", "no target model"},
      {"--target /no/such/dir", "target /no/such/dir: no such file or directory"},
      {"--config /no/such.json", "/no/such.json: cannot open server config"},
      {"--config " + dir.str("bad.json"), "bad.json"},
      {"--target " + demo + " --listen 256.0.0.1:1", "cannot listen on 256.0.0.1:1"},
      {"--target " + demo + " --max-sessions 0", "max_sessions must be at least 1"},
      {"--target " + demo + " --shutdown-grace-s inf", "shutdown_grace_s must be a number of seconds in [0, 86400]"},
      {"--target " + demo + " --shutdown-grace-s nan", "shutdown_grace_s must be a number of seconds"},
      {"--target " + demo + " --emulate-forward-ms 30:x", "emulate_forward_ms '30:x': expected FIXED[:PER_ROW]"},
      // --check-config reads the target's config: one that is not there,
      // or is no model, fails it as it would fail the start.
      {"--check-config --target " + dir.str("absent"), "absent: no such file or directory"},
      {"--check-config --target " + dir.str(), "config.json"},
  };
  for (const auto& c : cases) {
    const ProcessRun r = run("splitspec-server", c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
  // --check-config judges the configuration without loading a model or
  // opening a port (deploy/check.sh runs it on the rendered ConfigMap).
  const ProcessRun ok = run("splitspec-server", "--check-config --config " + std::string(SPLITSPEC_SOURCE_DIR) +
                                                    "/configs/server.json --listen 0.0.0.0:1 --target " + demo);
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("configuration OK"), std::string::npos) << ok.out;
  const ProcessRun bad = run("splitspec-server", "--check-config --config " + dir.str("bad.json"));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("bad.json"), std::string::npos) << bad.err;
  const ProcessRun help = run("splitspec-server", "--help");
  EXPECT_EQ(help.status, 0);
  for (const char* flag : {"--target", "--listen", "--config", "--max-sessions", "--max-draft-tokens", "--threads",
                           "--shutdown-grace-s", "--log-level", "--port-file"})
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
}

TEST(ServerCli, GenerateModesThroughTheCliReportTheirStats) {
  test::LocalServer srv = test::start_server(test::demo_target_dir());
  const std::string common = " --prompt 'The whale' --max-new-tokens 20 --ignore-eos --json --threads 1";
  const ProcessRun local = run("splitspec", "generate --mode local-ar --target " + test::demo_target_dir() + common);
  const ProcessRun edge = run("splitspec", "generate --mode edge-sd --gamma 3 --server " + srv.address + " --draft " +
                                        test::demo_draft_dir() + common);
  const ProcessRun cloud = run("splitspec", "generate --mode cloud-ar --server " + srv.address + " --tokenizer " +
                                         test::demo_target_dir() + common);
  for (const ProcessRun* r : {&local, &edge, &cloud}) ASSERT_EQ(r->status, 0) << r->err;
  const auto l = nlohmann::json::parse(local.out), e = nlohmann::json::parse(edge.out), c = nlohmann::json::parse(cloud.out);
  EXPECT_EQ(e["output_ids"], l["output_ids"]);
  EXPECT_EQ(c["output_ids"], l["output_ids"]);
  EXPECT_EQ(e["text"], l["text"]);
  EXPECT_EQ(e["mode"], "edge-sd");
  for (const char* k : {"rounds", "tau", "draft_ms", "verify_wait_ms", "network_rtt_ms", "acceptance_rate",
                        "acceptance_per_position", "target_forwards", "wall_ms", "ms_per_token"})
    EXPECT_TRUE(e["stats"].contains(k)) << k;
  EXPECT_EQ(e["stats"]["acceptance_per_position"].size(), 3u);
  EXPECT_EQ(e["stats"]["target_forwards"], e["stats"]["rounds"]);
  EXPECT_EQ(c["stats"]["target_forwards"], 20);

  // Operators read the same counters from the CLI.
  const ProcessRun info = run("splitspec", "info --server " + srv.address);
  ASSERT_EQ(info.status, 0) << info.err;
  const auto i = nlohmann::json::parse(info.out);
  EXPECT_EQ(i["model_name"], "demo-target");
  EXPECT_EQ(i["stats"]["active_sessions"], 0);
  EXPECT_EQ(i["stats"]["sessions_total"], "2");  // proto3 JSON writes 64-bit integers as strings
  const ProcessRun health = run("splitspec", "health --server " + srv.address);
  EXPECT_EQ(health.status, 0) << health.err;
  EXPECT_EQ(health.out, "SERVING\n");
  EXPECT_EQ(run("splitspec", "health --server 127.0.0.1:1 --timeout-s 1").status, 1);
}

// bench load end to end, small: two sessions, one generation each, batching
// on and off in ABBA order, each phase against its own server process.
TEST(ServerCli, BenchLoadRunsBothBatchingSettingsAndReportsTheirRatio) {
  const test::CliRun r = test::run_cli("bench load --target " + test::demo_target_dir() + " --draft " +
                                       test::demo_draft_dir() +
                                       " --sessions 2 --batching on,off --generations 1 --max-new-tokens 8 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  ASSERT_EQ(out["rows"].size(), 2u) << r.out;
  for (const auto& row : out["rows"]) {
    // 2 sessions x 2 phases (ABBA) x 1 generation x 8 tokens.
    EXPECT_EQ(row["tokens"].get<int64_t>(), 32) << row;
    EXPECT_EQ(row["generations"].get<int64_t>(), 4) << row;
    EXPECT_TRUE(row["errors"].empty()) << row;
    EXPECT_GT(row["server_peak_rss_mb"].get<double>(), 0.0) << row;
    EXPECT_GT(row["server_forwards"].get<double>(), 0.0) << row;
  }
  ASSERT_EQ(out["batching_ratios"].size(), 1u) << r.out;
  const auto& ratio = out["batching_ratios"][0];
  EXPECT_EQ(ratio["sessions"].get<int>(), 2);
  EXPECT_EQ(ratio["pairs"].get<int>(), 2);
  EXPECT_GT(ratio["on_over_off_tokens_per_s"].get<double>(), 0.0);
  ASSERT_TRUE(ratio.contains("ci95")) << ratio;
  EXPECT_LE(ratio["ci95"][0].get<double>(), ratio["ci95"][1].get<double>());
  const test::CliRun bad = test::run_cli("bench load --target " + test::demo_target_dir() + " --batching maybe");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("--batching takes on and/or off"), std::string::npos) << bad.err;
}

// bench regimes end to end, small: one emulated server, one cell, two modes;
// every cell says it is emulated, and the map is drawn. Bad sweeps are refused.
TEST(ServerCli, BenchRegimesRunsACellPerEmulatedServerAndDrawsTheMap) {
  TempDir dir;
  test::write_file(dir.path() / "prompts.jsonl", "{\"prompt\": \"Once upon a time\"}\n{\"prompt\": \"The robot\"}\n");
  const std::string common = "bench regimes --target " + test::demo_target_dir() + " --draft " +
                             test::demo_draft_dir() + " --prompts " + dir.str("prompts.jsonl");
  const test::CliRun r =
      test::run_cli(common + " --forward-ms 2 --per-row-ms 0.1 --delays-ms 0 --draft-factors 1,3 --num-prompts 2 "
                             "--max-new-tokens 8 --modes cloud-ar,edge-sd --json --svg " + dir.str("map.svg"));
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_NE(out["note"].get<std::string>().find("EMULATED"), std::string::npos);
  ASSERT_EQ(out["cells"].size(), 2u) << r.out;
  for (const auto& cell : out["cells"]) {
    EXPECT_EQ(cell["emulate_forward_ms"], "2:0.1");
    EXPECT_NE(cell["emulated"].get<std::string>().find("server forwards 2:0.1 ms"), std::string::npos) << cell;
    EXPECT_EQ(cell["edge-sd"]["tokens"].get<int64_t>(), 16) << cell;
    EXPECT_GE(cell["cloud-ar"]["T_q_ms"].get<double>(), 2.0) << "an emulated forward is never shorter";
  }
  EXPECT_NE(out["cells"][1]["emulated"].get<std::string>().find("drafting x3"), std::string::npos);
  EXPECT_NE(test::read_file(dir.path() / "map.svg").find("<svg"), std::string::npos);
  const test::CliRun no_base = test::run_cli(common + " --modes edge-sd,edge-fsd");
  EXPECT_EQ(no_base.status, 1);
  EXPECT_NE(no_base.err.find("--modes must include cloud-ar"), std::string::npos) << no_base.err;
  const test::CliRun negative = test::run_cli(common + " --forward-ms -5");
  EXPECT_EQ(negative.status, 1) << negative.err;
}

TEST(ServerCli, ServerModesWithoutTheirPartsAreClearErrors) {
  const std::string ids = " --prompt-ids 1,5 --threads 1";
  const struct {
    std::string args, message;
  } cases[] = {
      {"generate --mode edge-sd --server 127.0.0.1:1" + ids, "edge-sd needs a draft model (--draft DIR)"},
      {"generate --mode edge-sd --draft " + test::demo_draft_dir() + ids, "edge-sd needs a server (--server HOST:PORT)"},
      {"generate --mode local-ar" + ids, "local-ar needs --target DIR"},
      {"generate --mode cloud-ar --server 127.0.0.1:1" + ids, "cannot reach server 127.0.0.1:1"},
      {"generate --mode warp --server 127.0.0.1:1" + ids, "--mode"},
  };
  for (const auto& c : cases) {
    const ProcessRun r = run("splitspec", c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args;
  }
}

}  // namespace
}  // namespace splitspec

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "client/client.h"

namespace splitspec {
namespace {

std::string http(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

// prometheus-cpp's exposer (civetweb) cannot start its threads in a process
// that links LibTorch, as this test program does (for the trainer's tests),
// so the endpoint is checked on a splitspec-server process, which does not.
TEST(ServerMetrics, PrometheusEndpointCountsRoundsAndRefusesGarbage) {
  test::TempDir tmp;
  std::unique_ptr<test::Child> child;
  const std::string address = test::spawn_server(test::demo_target_dir(), tmp, child,
                                                 {"--metrics-listen", "127.0.0.1:0", "--log-level", "info"});
  const std::string log = test::read_file(tmp.path() / "server.err");
  const size_t at = log.find("event=metrics listen=127.0.0.1:0 port=");
  ASSERT_NE(at, std::string::npos) << log;
  const int metrics_port = std::atoi(log.c_str() + at + std::string("event=metrics listen=127.0.0.1:0 port=").size());
  ASSERT_GT(metrics_port, 0);
  ClientOptions o;
  o.mode = Mode::kEdgeSd;
  o.server = address;
  o.draft_dir = test::demo_draft_dir();
  Request req;
  req.max_new_tokens = 16;
  req.ignore_eos = true;
  const Result r = Client::connect(o)->generate_ids({1, 345, 1046}, req);
  // The session is freed after its stream ends, a moment after the client returns.
  ASSERT_TRUE(test::wait_until(
      [&] {
        return http(metrics_port, "GET /metrics HTTP/1.0\r\n\r\n").find("\nsplitspec_active_sessions 0\n") !=
               std::string::npos;
      },
      std::chrono::seconds(10)));
  const std::string page = http(metrics_port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(page.rfind("HTTP/1.1 200 OK", 0), 0u) << page;
  EXPECT_NE(page.find("# TYPE splitspec_spec_decode_num_draft_tokens_total counter"), std::string::npos) << page;
  auto sample = [&](const std::string& name) {
    const size_t at = page.find("\n" + name + " ");
    EXPECT_NE(at, std::string::npos) << name << " in " << page;
    return at == std::string::npos ? -1.0 : std::strtod(page.c_str() + at + name.size() + 2, nullptr);
  };
  EXPECT_EQ(sample("splitspec_spec_decode_rounds_total"), static_cast<double>(r.stats.rounds));
  EXPECT_EQ(sample("splitspec_spec_decode_num_emitted_tokens_total"), 16.0);
  EXPECT_EQ(sample("splitspec_active_sessions"), 0.0);
  // The error-rate alert of deploy/ divides by these.
  EXPECT_EQ(sample("splitspec_streams_finished_total{code=\"OK\"}"), 1.0);
  EXPECT_EQ(sample("splitspec_streams_finished_total{code=\"INTERNAL\"}"), 0.0);
  // Rounds that drafted a first token; it is accepted at most as often.
  const double drafted_1 = sample("splitspec_spec_decode_num_drafts_at_position_total{position=\"1\"}");
  EXPECT_GT(drafted_1, 0.0);
  EXPECT_LE(drafted_1, static_cast<double>(r.stats.rounds));
  EXPECT_LE(sample("splitspec_spec_decode_num_accepted_at_position_total{position=\"1\"}"), drafted_1);
  EXPECT_NE(page.find("# TYPE splitspec_round_latency_ms histogram"), std::string::npos) << page;
  EXPECT_EQ(sample("splitspec_round_latency_ms_count"), static_cast<double>(r.stats.rounds));
  EXPECT_EQ(http(metrics_port, "GET /other HTTP/1.1\r\nConnection: close\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_NE(http(metrics_port, "\x16\x03\x01 garbage\r\n\r\n").find(" 400 Bad Request"), std::string::npos);
  // Three clients that hold a worker each (two silent, one sending half a
  // request) do not stop the next scrape: it is answered while all three
  // are still open, not after the server timed them out.
  std::vector<int> slow;
  for (int i = 0; i < 3; ++i) {
    slow.push_back(socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(metrics_port));
    ASSERT_EQ(connect(slow.back(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }
  const std::string half = "GET /metrics HTTP/1.1\r\nHost:";
  send(slow.back(), half.data(), half.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // each taken by a worker
  EXPECT_EQ(http(metrics_port, "GET /metrics HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200 OK", 0), 0u);
  for (const int fd : slow) {
    char c;
    EXPECT_EQ(recv(fd, &c, 1, MSG_DONTWAIT), -1) << "closed by its timeout before the scrape was answered";
    close(fd);
  }
}

}  // namespace
}  // namespace splitspec

// splitspec-server's flags and the CLI's server modes, as a user meets them
// (the programs run): clear errors, documented flags, the JSON stats
// contract, the metrics endpoint.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

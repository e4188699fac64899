// The `splitspec` binary as users run it: output contract, help, and clear
// errors (exit status 1, one line on stderr) for bad input.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <sstream>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>

#include "common/model/model.h"
#include "tests/edge_cloud_util.h"
#include "tests/test_util.h"

namespace splitspec::test {

TEST(Cli, HelpDocumentsEveryGenerateFlag) {
  const CliRun r = run_cli("generate --help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--model", "--prompt", "--prompt-ids", "--max-new-tokens", "--temperature", "--top-k",
                           "--top-p", "--seed", "--ignore-eos", "--json", "--threads"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

// Inference commands run in splitspec, which loads no LibTorch; train and eval
// are handed to splitspec-train with the same arguments, global flags and all.
TEST(Cli, TrainAndEvalRunInTheTrainingProgram) {
  const CliRun help = run_cli("--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("train"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("runs splitspec-train"), std::string::npos) << help.out;
  for (const char* args : {"train lm --help", "--log-level warn train lm --help", "--log-level=error eval ppl --help"}) {
    const CliRun r = run_cli(args);
    EXPECT_EQ(r.status, 0) << args << ": " << r.err;
    EXPECT_NE(r.out.find("Usage: splitspec "), std::string::npos) << args << ": " << r.out;
  }
  const CliRun bad = run_cli("train nonsense");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("subcommand is required"), std::string::npos) << bad.err;
  EXPECT_NE(run_binary("splitspec-train", "generate").status, 0) << "only train and eval live there";
}

TEST(Cli, JsonOutputContract) {
  TempDir dir;
  Model::random(tiny_config(), 3)->save(dir.str());
  const CliRun r = run_cli("generate --model " + dir.str() + " --prompt-ids 1,2,3 --max-new-tokens 5 --json --threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);  // exactly one object
  EXPECT_EQ(j["mode"], "local-ar");
  EXPECT_EQ(j["prompt_ids"], (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(j["output_ids"].size(), 5u);
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_TRUE(j["text"].is_null()) << "no tokenizer in this model directory";
  for (const char* k : {"new_tokens", "wall_ms", "ms_per_token", "target_forwards"}) EXPECT_TRUE(j["stats"].contains(k)) << k;
  EXPECT_EQ(j["stats"]["new_tokens"], 5);
}

TEST(Cli, TextPromptWithRealTokenizer) {
  const auto shared = shared_dir();
  if (!shared) GTEST_SKIP() << "../shared is absent: text prompt through the CLI not checked";
  const std::string model = (*shared / "models" / "stories260K").string();
  const CliRun j = run_cli("generate --model " + model + " --prompt 'Once upon a time' --max-new-tokens 12 --json");
  ASSERT_EQ(j.status, 0) << j.err;
  const auto obj = nlohmann::json::parse(j.out);
  EXPECT_EQ(obj["prompt_ids"], (std::vector<int>{1, 403, 407, 261, 378}));
  EXPECT_EQ(obj["text"].get<std::string>().rfind(", there was a little girl", 0), 0u) << obj["text"];
  const CliRun s = run_cli("generate --model " + model + " --prompt 'Once upon a time' --max-new-tokens 12");
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_EQ(s.out, obj["text"].get<std::string>() + "\n") << "streamed text equals the JSON text";
  EXPECT_NE(s.err.find("12 tokens"), std::string::npos) << "stats line on stderr";
}

TEST(CliBadInput, ClearErrorsNeverCrashes) {
  TempDir dir;
  Model::random(tiny_config(), 3)->save(dir.str());
  const std::string m = "generate --model " + dir.str() + " ";
  std::string long_prompt = "3";
  for (int i = 1; i < 70; ++i) long_prompt += ",3";
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"generate --model /no/such/dir --prompt-ids 1", "/no/such/dir: model directory does not exist"},
      {m + "--prompt-ids 1,77", "prompt token id 77 outside the vocabulary [0, 50)"},
      {m + "--prompt-ids 1,-4", "prompt token id -4 outside the vocabulary"},
      {m + "--prompt hello", "no tokenizer found (tokenizer.gguf, tokenizer.model or tokenizer.json; needed for text prompts): give one with --tokenizer PATH"},
      {m, "give --prompt, --chat, --prompt-ids or --prompts-file"},
      {m + "--prompt-ids " + long_prompt,
       "does not fit the model's context of 64"},
      {m + "--prompt-ids 1 --temperature 1 --top-p 2", "top-p must be in (0, 1]"},
  };
  for (const auto& c : cases) {
    const CliRun r = run_cli(c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args;
  }
  // Argument errors are reported by the parser with a non-zero status.
  const CliRun bad_id = run_cli(m + "--prompt-ids 1,x");
  EXPECT_NE(bad_id.status, 0);
  EXPECT_FALSE(bad_id.err.empty());
  write_file(dir.path() / "config.json", "{\"hidden_size\": ");
  const CliRun bad_cfg = run_cli(m + "--prompt-ids 1");
  EXPECT_EQ(bad_cfg.status, 1);
  EXPECT_NE(bad_cfg.err.find("config.json: not valid JSON"), std::string::npos) << bad_cfg.err;
}

TEST(Cli, BenchForwardJson) {
  TempDir dir;
  Model::random(tiny_config(), 3)->save(dir.str());
  const CliRun r = run_cli("bench forward --model " + dir.str() + " --contexts 16,32 --new-tokens 1,4 --min-seconds 0.01 --json --threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 4u);
  EXPECT_EQ(j["rows"][3]["context"], 32);
  EXPECT_EQ(j["rows"][3]["new_tokens"], 4);
  EXPECT_GT(j["rows"][3]["ms"].get<double>(), 0.0);
  EXPECT_EQ(j["weight_bytes"].get<int64_t>(), tiny_config().num_parameters() * 4);
}

// Rows of one interleaved run may set their own tree size and draft width.
TEST(Cli, BenchLocalRowsWithTheirOwnTreeSettings) {
  TempDir dir;
  write_file(dir.path() / "p.jsonl", "{\"turns\": [\"Tell me about the sea.\"]}\n{\"turns\": [\"Why is the sky blue?\"]}\n");
  const std::string base = "bench local --target " + demo_target_dir() + " --draft " + demo_draft_dir() + " --prompts " +
                           dir.str("p.jsonl") + " --num-prompts 2 --max-new-tokens 6 --budgets 25% --threads 1 --json ";
  const CliRun r = run_cli(base + "--configs std,tree/nodes=3/width=2,tree");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1]["configuration"], "tree/nodes=3/width=2");
  EXPECT_GT(rows[1]["tree_nodes"].get<double>(), 0.0);
  EXPECT_LE(rows[1]["tree_nodes"].get<double>(), 3.0);
  EXPECT_GT(rows[2]["tree_nodes"].get<double>(), 3.0) << "the other tree row keeps the default size";
  for (const char* bad : {"tree/nodes=0", "tree/depth=3", "std/width=2", "tree/width=2x"}) {
    const CliRun e = run_cli(base + "--configs std," + bad);
    EXPECT_EQ(e.status, 1) << bad;
    EXPECT_NE(e.err.find("bad setting"), std::string::npos) << bad << "\n" << e.err;
  }
}

// The edge-cloud bench runs every mode through its own netem proxy and
// reports each mode's figures and the Table 4 model; not timed, only read.
TEST(Cli, BenchEdgeCloudJsonHasEveryModeAndItsFigures) {
  TempDir dir;
  write_file(dir.path() / "p.jsonl", "{\"turns\": [\"Tell me about the sea.\"]}\n{\"prompt\": \"Why is the sky blue?\"}\n");
  LocalServer srv = start_server(demo_target_dir());
  const CliRun r = run_cli("bench edge-cloud --server " + srv.address + " --draft " + demo_draft_dir() + " --prompts " +
                           dir.str("p.jsonl") + " --num-prompts 2 --max-new-tokens 8 --delays-ms 0 --gamma 3 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out)["rows"];
  ASSERT_EQ(rows.size(), 1u);
  for (const char* mode : {"cloud-ar", "edge-sd", "edge-fsd"}) {
    const auto& m = rows[0][mode];
    EXPECT_EQ(m["tokens"], 16) << mode;
    EXPECT_GT(m["ms_per_token"].get<double>(), 0.0) << mode;
    EXPECT_GT(m["model_ms_per_token"].get<double>(), 0.0) << mode;
  }
  EXPECT_GT(rows[0]["edge-sd"]["draft_ms_per_forward"].get<double>(), 0.0);
  const auto& fsd = rows[0]["edge-fsd"];
  EXPECT_GE(fsd["cache_miss_rate"].get<double>(), 0.0);
  EXPECT_LE(fsd["cache_miss_rate"].get<double>(), 1.0);
  EXPECT_EQ(fsd["predraft_round_share"].get<double>(), 1.0) << "edge-fsd pre-drafts every round by default";
  // Every pair of modes, in the order given, each speedup inside its interval.
  const auto& speedups = rows[0]["speedups"];
  ASSERT_EQ(speedups.size(), 3u);
  EXPECT_EQ(speedups[1]["from"], "cloud-ar");
  EXPECT_EQ(speedups[1]["to"], "edge-fsd");
  for (const auto& s : speedups) {
    EXPECT_NEAR(s["speedup"].get<double>(),
                rows[0][s["from"].get<std::string>()]["ms_per_token"].get<double>() /
                    rows[0][s["to"].get<std::string>()]["ms_per_token"].get<double>(),
                1e-9);
    EXPECT_LE(s["ci95"][0].get<double>(), s["speedup"].get<double>());
    EXPECT_GE(s["ci95"][1].get<double>(), s["speedup"].get<double>());
  }
  EXPECT_TRUE(wait_until([&] { return srv.server->active_sessions() == 0; }, std::chrono::seconds(10)));
}

// The main command's example against a real server: every edge mode streams
// its text, and greedy edge-sd, edge-fsd, server+model-tree and server+lut reproduce cloud-ar.
TEST(Cli, ExampleRunsEveryEdgeModeAndChecksGreedyExactness) {
  LocalServer srv = start_server(demo_target_dir());
  const CliRun r = run_binary("splitspec-example", "--server " + srv.address + " --draft " + demo_draft_dir() +
                                                       " --lut " + demo_target_dir() + "/lut.safetensors --max-new-tokens 24");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  for (const char* part : {"== edge-sd", "== edge-fsd", "== cloud-ar", "== server+model-tree", "== server+lut",
                           "| edge-fsd ", "| server+model-tree |", "| server+lut ", "cache miss rate",
                           "greedy check: edge-sd, edge-fsd, server+model-tree, server+lut and cloud-ar give identical tokens",
                           "greedy ms/token"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  EXPECT_TRUE(wait_until([&] { return srv.server->active_sessions() == 0; }, std::chrono::seconds(10)));
}

}  // namespace splitspec::test

namespace splitspec::test {

TEST(Cli, EvalAcceptanceJson) {
  TempDir dir;
  Model::random(tiny_config(300), 3)->save(dir.str("target"));
  Model::random(tiny_config(300), 4)->save(dir.str("draft"));
  // Both need the same tokenizer: train one on a little text.
  write_file(dir.path() / "text.txt", "the cat sat on the mat. the dog ran to the park.\n\nthe bird sang in a tree.\n");
  ASSERT_EQ(run_cli("train tokenizer --corpus " + dir.str("text.txt") + " --vocab-size 300 --out " + dir.str("target")).status, 0);
  std::filesystem::copy_file(dir.path() / "target" / "tokenizer.model", dir.path() / "draft" / "tokenizer.model");
  write_file(dir.path() / "prompts.jsonl", "{\"turns\": [\"the cat\", \"ignored\"]}\n{\"turns\": [\"a dog ran\"]}\n");
  const CliRun r = run_cli("eval acceptance --draft " + dir.str("draft") + " --target " + dir.str("target") + " --prompts " +
                           dir.str("prompts.jsonl") + " --gamma 3 --max-new-tokens 8 --json --threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompts"], 2);
  EXPECT_EQ(j["acceptance_per_position"].size(), 3u);
  EXPECT_GE(j["tau"].get<double>(), 1.0);
  EXPECT_GT(j["c"].get<double>(), 0.0);
  EXPECT_TRUE(j["sampled"].contains("tau"));
}

TEST(CliBadInput, TrainAndEvalErrors) {
  TempDir dir;
  const CliRun a = run_cli("train tokenizer --corpus /no/such.txt --out " + dir.str("t"));
  EXPECT_EQ(a.status, 1);
  EXPECT_NE(a.err.find("/no/such.txt: corpus file not found"), std::string::npos) << a.err;
  write_file(dir.path() / "cfg.json", "{\"model\": {}, \"train\": {}}");
  const CliRun b = run_cli("train lm --config " + dir.str("cfg.json") + " --corpus x --valid y --tokenizer z --out " + dir.str("o"));
  EXPECT_EQ(b.status, 1);
  EXPECT_NE(b.err.find("missing required field 'hidden_size'"), std::string::npos) << b.err;
  Model::random(tiny_config(), 3)->save(dir.str("m"));
  write_file(dir.path() / "bad.jsonl", "{\"turns\": 3}\n");
  const CliRun c = run_cli("eval acceptance --draft " + dir.str("m") + " --target " + dir.str("m") + " --prompts " + dir.str("bad.jsonl"));
  EXPECT_EQ(c.status, 1);
  EXPECT_FALSE(c.err.empty());
}

}  // namespace splitspec::test

namespace splitspec::test {

// A real kill: SIGKILL the trainer once it has checkpointed, resume it, and
// get the same model as a run that was never interrupted.
TEST(CliTrain, ResumeAfterSigkillMatchesUninterruptedRun) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the cat sat on the mat and the dog ran to the park near the river.\n\n";
  write_file(dir.path() / "text.txt", text);
  ASSERT_EQ(run_cli("train tokenizer --corpus " + dir.str("text.txt") + " --vocab-size 300 --out " + dir.str("tok")).status, 0);
  nlohmann::json cfg = {{"model", nlohmann::json::parse(model_config_to_json(tiny_config(300, 1, true)))},
                        {"train",
                         {{"seq_len", 32}, {"batch_size", 4}, {"steps", 1000}, {"warmup_steps", 10}, {"lr", 1e-3},
                          {"min_lr", 1e-4}, {"eval_every", 0}, {"checkpoint_every", 20}, {"dtype", "F32"}}}};
  write_file(dir.path() / "cfg.json", cfg.dump());
  const std::string args = "train lm --config " + dir.str("cfg.json") + " --corpus " + dir.str("text.txt") + " --valid " +
                           dir.str("text.txt") + " --tokenizer " + dir.str("tok") + " --threads 1 --out ";

  // Spawned directly so that this test is the parent and can reap it.
  std::vector<std::string> argv_s = {std::string(SPLITSPEC_BIN_DIR) + "/splitspec"};
  std::istringstream words(args + dir.str("killed"));
  for (std::string w; words >> w;) argv_s.push_back(w);
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t quiet;
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&quiet, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &quiet, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&quiet);
  const auto state = dir.path() / "killed" / "checkpoint" / "state.json";
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 600 && !std::filesystem::exists(state); ++i) {  // at most 30 s
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    usleep(50 * 1000);
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(std::filesystem::exists(state)) << "no checkpoint appeared";
  ASSERT_FALSE(std::filesystem::exists(dir.path() / "killed" / "model.safetensors")) << "finished before the kill";

  const CliRun resumed = run_cli(args + dir.str("killed") + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resumed at step"), std::string::npos) << resumed.err;
  ASSERT_EQ(run_cli(args + dir.str("whole")).status, 0);
  EXPECT_TRUE(read_file(dir.path() / "killed" / "model.safetensors") == read_file(dir.path() / "whole" / "model.safetensors"))
      << "resumed model differs from the uninterrupted one";
}

}  // namespace splitspec::test

namespace splitspec::test {

// What a benchmarker reaches for: a prompts file, per-phase timings and
// counts in the JSON, the thread count used, tokenize, convert, and one
// --target flag (with --model as its alias) in every command.
TEST(CliBenchmarker, PromptsFileTimingsTokenizeAndConvert) {
  TempDir dir;
  const std::string target = demo_target_dir();
  {
    std::ofstream f(dir.str("p.jsonl"));
    f << "{\"prompt\": \"Once upon a time\"}\n{\"prompt_ids\": [1, 4274, 824]}\n"
         "{\"turns\": [\"What is two plus two?\", \"more\"], \"category\": \"math\"}\n";
  }
  CliRun r = run_cli("generate --target " + target + " --draft " + demo_draft_dir() + " --prompts-file " +
                     dir.str("p.jsonl") + " --max-new-tokens 6 --ignore-eos --json");
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["index"], n++);
    const auto& s = j["stats"];
    for (const char* key : {"prefill_ms", "decode_ms", "decode_tokens_per_s", "drafted_tokens", "accepted_tokens",
                            "target_forward_ms", "threads"})
      EXPECT_TRUE(s.contains(key)) << key;
    EXPECT_GT(s["target_forward_ms"].get<double>(), 0.0);
    EXPECT_GT(s["prefill_ms"].get<double>(), 0.0);
    EXPECT_EQ(s["threads"], 1) << "OMP_NUM_THREADS (ctest sets 1) is the default";
    // Per-token latency after the first round, in order.
    const double p50 = s["token_ms_p50"], p90 = s["token_ms_p90"], p99 = s["token_ms_p99"], max = s["token_ms_max"];
    EXPECT_GE(p50, 0.0);
    EXPECT_LE(p50, p90);
    EXPECT_LE(p90, p99);
    EXPECT_LE(p99, max);
    if (s["rounds"].get<int64_t>() > 1) {
      EXPECT_GT(p50, 0.0);
    }
    EXPECT_EQ(j["output_ids"].size(), 6u);
  }
  EXPECT_EQ(n, 3);
  // One bad line: reported, the others still run, exit status 1.
  {
    std::ofstream f(dir.str("bad.jsonl"));
    f << "{\"prompt_ids\": [1, 99999]}\n{\"prompt\": \"fine\"}\n";
  }
  r = run_cli("generate --target " + target + " --prompts-file " + dir.str("bad.jsonl") + " --max-new-tokens 2 --json");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("outside the vocabulary"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("1 of 2 prompts"), std::string::npos) << r.err;
  {
    std::ofstream f(dir.str("broken.jsonl"));
    f << "{\"prompt\": 3}\n";
  }
  r = run_cli("generate --target " + target + " --prompts-file " + dir.str("broken.jsonl"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("broken.jsonl:1: needs"), std::string::npos) << r.err;

  // tokenize: what generate --prompt feeds the model, and back.
  r = run_cli("tokenize --target " + target + " --text 'Once upon a time'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "1,4274,824,261,615\n");
  r = run_cli("tokenize --model " + target + " --ids 4274,824,261,615");
  EXPECT_EQ(r.out, "Once upon a time\n");
  EXPECT_NE(run_cli("tokenize --target " + target + " --ids 9000").err.find("outside the vocabulary"), std::string::npos);

  // convert: a type, GGUF out and back, and its refusals.
  r = run_cli("convert --target " + target + " --dtype q8_0 --out " + dir.str("q8"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Model::load(dir.str("q8"))->weight_type(), WType::Q8_0);
  EXPECT_TRUE(std::filesystem::exists(dir.str("q8/tokenizer.model")));
  ASSERT_EQ(run_cli("convert --target " + dir.str("q8") + " --to-gguf " + dir.str("q8.gguf")).status, 0);
  ASSERT_EQ(run_cli("convert --from " + dir.str("q8.gguf") + " --out " + dir.str("back")).status, 0);
  const std::string ids = " --prompt-ids 1,4274,824 --max-new-tokens 12 --json";
  EXPECT_EQ(nlohmann::json::parse(run_cli("generate --target " + dir.str("back") + ids).out)["output_ids"],
            nlohmann::json::parse(run_cli("generate --target " + dir.str("q8") + ids).out)["output_ids"]);
  // The demo pair across conversions: one fingerprint in every form, and
  // the draft pairs with the converted target.
  ASSERT_EQ(run_cli("convert --target " + target + " --to-gguf " + dir.str("demo.gguf")).status, 0);
  ASSERT_EQ(run_cli("convert --from " + dir.str("demo.gguf") + " --out " + dir.str("demo-back")).status, 0);
  auto fingerprint = [&](const std::string& where) {
    const CliRun t = run_cli("tokenize --target " + where + " --text 'Once upon a time' --json");
    EXPECT_EQ(t.status, 0) << t.err;
    return nlohmann::json::parse(t.out)["fingerprint"].get<std::string>();
  };
  const std::string demo_fp = fingerprint(target);
  EXPECT_EQ(fingerprint(dir.str("demo.gguf")), demo_fp);
  EXPECT_EQ(fingerprint(dir.str("demo-back")), demo_fp);
  EXPECT_EQ(fingerprint(demo_draft_dir()), demo_fp);
  for (const std::string& t : {dir.str("demo.gguf"), dir.str("demo-back")}) {
    r = run_cli("generate --target " + t + " --draft " + demo_draft_dir() + ids);
    ASSERT_EQ(r.status, 0) << t << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["output_ids"],
              nlohmann::json::parse(run_cli("generate --target " + target + ids).out)["output_ids"]) << t;
  }
  EXPECT_NE(run_cli("convert --target " + target + " --dtype q3 --out x").err.find("unknown weight type 'q3'"),
            std::string::npos);
  EXPECT_NE(run_cli("convert --target " + target).err.find("give --out DIR or --to-gguf FILE"), std::string::npos);
  EXPECT_NE(run_cli("convert --target " + target + " --out " + target).err.find("must not be the model's own directory"),
            std::string::npos);
  EXPECT_NE(run_cli("convert --from " + dir.str("none.gguf") + " --out " + dir.str("x")).err.find("cannot open"),
            std::string::npos);
  // bench forward at a type, with the type, kernels and threads in its JSON.
  r = run_cli("bench forward --target " + target + " --dtype q4_0 --contexts 16 --new-tokens 1,2 --min-seconds 0.01 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto b = nlohmann::json::parse(r.out);
  EXPECT_EQ(b["dtype"], "q4_0");
  EXPECT_EQ(b["threads"], 1);
}

}  // namespace splitspec::test

namespace splitspec::test {
namespace {

// One version number: every program's --version, and the image tags
// deploy/ builds and deploys.
TEST(Cli, EveryProgramSaysTheOneVersion) {
  const std::string version = SPLITSPEC_VERSION;
  for (const std::string program : {"splitspec", "splitspec-train", "splitspec-server"}) {
    const CliRun r = run_binary(program, "--version");
    EXPECT_EQ(r.status, 0) << program << ": " << r.err;
    EXPECT_EQ(r.out, program + " " + version + "\n") << program;
  }
  const std::filesystem::path deploy = std::filesystem::path(SPLITSPEC_SOURCE_DIR) / "deploy";
  for (const auto& [file, tag] : std::vector<std::pair<std::string, std::string>>{
           {"kubernetes/base/kustomization.yaml", "newTag: \"" + version + "\""},
           {"kubernetes/overlays/gpu/kustomization.yaml", "newTag: \"" + version + "-gpu\""},
           {"image/build.sh", "TAG=\"${2:-" + version + "}\""},
           {"image/smoke.sh", "TAG=\"${2:-" + version + "}\""}})
    EXPECT_NE(read_file(deploy / file).find(tag), std::string::npos) << file << " should hold " << tag;
}

// A usage error (an unknown flag, a missing value, a subcommand missing)
// exits 1, as every other error does; --help exits 0.
// The drafters a target can be given, trained on a GGUF target: early exits
// land in FILE.splitspec/ (created), lut tables and the recurrent head in
// folders that did not exist; each then drafts for the GGUF target.
TEST(CliTrain, ExitsLutAndRecurrentOnAGgufTarget) {
  TempDir dir;
  ASSERT_EQ(run_cli("convert --target " + demo_target_dir() + " --to-gguf " + dir.str("t.gguf")).status, 0);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Once upon a time there was a little dog who liked to run in the park.\n\n";
  write_file(dir.path() / "text.txt", text);
  const std::string common = " --corpus " + dir.str("text.txt") + " --threads 1";
  CliRun r = run_cli("train exits --target " + dir.str("t.gguf") + " --layers 4 --steps 3 --batch 2 --seq-len 32" + common);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "t.splitspec" / "early_exits.json"));
  r = run_cli("train lut --target " + dir.str("t.gguf") + " --tokens 500 --out " + dir.str("a/b/lut.safetensors") + common);
  ASSERT_EQ(r.status, 0) << r.err;
  r = run_cli("train recurrent --target " + dir.str("t.gguf") + " --continuations 10 --new-tokens 12 --steps 2 --batch 8 --out " +
              dir.str("c/d") + common);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string gen = " --prompt 'Once upon' --max-new-tokens 6 --json --threads 1";
  const auto alone = nlohmann::json::parse(run_cli("generate --target " + dir.str("t.gguf") + gen).out)["output_ids"];
  for (const std::string& drafter : {"--drafter lut --lut " + dir.str("a/b/lut.safetensors"),
                                    "--drafter recurrent --drafter-option head=" + dir.str("c/d/recurrent_drafter.safetensors")}) {
    r = run_cli("generate --target " + dir.str("t.gguf") + " " + drafter + gen);
    ASSERT_EQ(r.status, 0) << drafter << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["output_ids"], alone) << drafter;
  }
}

// A usage error is one "PROGRAM: error:" line, as every other error, and
// exits 1.
TEST(Cli, UsageErrorsExitWithStatusOne) {
  for (const std::string args : {"generate --no-such-flag", "generate --max-new-tokens", "", "frobnicate",
                                 "generate --max-new-tokens many", "tokenize --text a --ids 1"}) {
    const CliRun r = run_cli(args);
    EXPECT_EQ(r.status, 1) << "'" << args << "'";
    EXPECT_EQ(r.err.rfind("splitspec: error: ", 0), 0u) << "'" << args << "': " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "'" << args << "': " << r.err;
  }
  const CliRun server = run_binary("splitspec-server", "--no-such-flag");
  EXPECT_EQ(server.status, 1);
  EXPECT_EQ(server.err.rfind("splitspec-server: error: ", 0), 0u) << server.err;
  const CliRun train = run_binary("splitspec-train", "--no-such-flag");
  EXPECT_EQ(train.status, 1);
  EXPECT_EQ(train.err.rfind("splitspec-train: error: ", 0), 0u) << train.err;
  EXPECT_EQ(run_cli("generate --help").status, 0);
}

}  // namespace
}  // namespace splitspec::test

namespace splitspec::test {
namespace {

// generate --dtype converts at load what convert --dtype writes: the same
// tokens either way; a streamed target and unknown types are refused.
TEST(Cli, GenerateDtypeConvertsAtLoadAsConvertWrites) {
  TempDir dir;
  const std::string target = demo_target_dir();
  ASSERT_EQ(run_cli("convert --target " + target + " --dtype q8_0 --out " + dir.str("q8")).status, 0);
  const std::string common = " --prompt-ids 1,345,1046 --max-new-tokens 16 --ignore-eos --json --threads 1";
  const CliRun at_load = run_cli("generate --target " + target + " --dtype q8_0 --draft " + demo_draft_dir() + common);
  const CliRun written = run_cli("generate --target " + dir.str("q8") + " --draft " + demo_draft_dir() +
                                 " --dtype q8_0" + common);
  ASSERT_EQ(at_load.status, 0) << at_load.err;
  ASSERT_EQ(written.status, 0) << written.err;
  EXPECT_EQ(nlohmann::json::parse(at_load.out)["output_ids"], nlohmann::json::parse(written.out)["output_ids"]);
  const CliRun streamed = run_cli("generate --target " + target + " --dtype q8_0 --memory-budget 50%" + common);
  EXPECT_EQ(streamed.status, 1);
  EXPECT_NE(streamed.err.find("convert --dtype q8_0"), std::string::npos) << streamed.err;
  const CliRun bad = run_cli("generate --target " + target + " --dtype q3_x" + common);
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("q3_x"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace splitspec::test

namespace splitspec::test {
namespace {

// convert --random-init writes GGUF with a SentencePiece tokenizer too (it
// failed with ": cannot open"), and the file generates.
TEST(Cli, ARandomModelWithASentencePieceTokenizerGoesToGguf) {
  TempDir dir;
  const std::string config = demo_target_dir() + "/config.json";
  const CliRun w = run_cli("convert --random-init " + config + " --tokenizer " + demo_target_dir() + " --to-gguf " +
                           dir.str("random.gguf"));
  ASSERT_EQ(w.status, 0) << w.err;
  const CliRun g = run_cli("generate --target " + dir.str("random.gguf") +
                           " --prompt 'Once upon' --max-new-tokens 4 --ignore-eos --json --threads 1");
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_EQ(nlohmann::json::parse(g.out)["output_ids"].size(), 4u);
  EXPECT_FALSE(std::filesystem::exists(dir.str("random.gguf.dir.tmp")));
  const CliRun none = run_cli("convert --random-init " + config + " --tokenizer " + dir.str("nothing") + " --to-gguf " +
                              dir.str("other.gguf"));
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.err.find("nothing: tokenizer file not found"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace splitspec::test

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "client/cli/commands.h"
#include "client/cli/prompts.h"
#include "client/cli/stats_json.h"
#include "client/client.h"
#include "common/drafting/registry.h"
#include "common/drafting/tree_options.h"
#include "common/kernels/threads.h"
#include "common/util/error.h"
#include "client/cli/speculative_flags.h"

namespace splitspec::cli {

namespace {

struct GenerateArgs {
  std::string mode;  // an alias: decides verifier, drafter and predraft
  std::string verifier;
  std::string drafter;
  bool predraft = false;
  std::vector<std::string> drafter_options;  // key=value
  std::string lut;                           // the lut drafter's tables
  std::string target_dir;  // --target or --model
  std::string draft_dir;
  std::string server;
  std::string tokenizer;
  std::string prompt;
  bool text_prompt = false;  // --prompt given (possibly empty: BOS alone)
  std::string chat;          // --chat: the user's message
  std::string system;        // --system: the system message before it
  std::string chat_template;
  std::string prompts_file;  // JSONL, one generation per line
  std::vector<int32_t> prompt_ids;
  Request request;
  int threads = 0;  // default_threads()
  int predraft_threads = 1;
  std::string predraft_queue = "priority";
  bool predraft_adaptive = false;
  double emulate_draft_factor = 1;
  double deadline_s = 120;
  double round_timeout_s = 0;
  double reconnect_budget_s = 10;
  std::string fallback_target;
  double failback_interval_s = 0.5;
  bool strict_numerics = false;
  std::string tls_ca, tls_cert, tls_key, tls_server_name, auth_token_file;
  bool allow_insecure_tokens = false;
  bool json = false;
  // Local modes.
  std::string memory_budget;
  std::string device;
  std::string kv_cache;
  std::string dtype;
  bool no_pipeline = false;
  std::string read_ahead;
  bool no_fallback = false;
  bool no_provisional = false;
  TreeOptions tree;  // model-tree's flags; the two switches above turn its own off
};

// The parts that the mode measures.
nlohmann::json stats_json(const Stats& s, const ClientOptions& o) {
  nlohmann::json j = {{"threads", compute_threads()}};
  if (o.verifier == VerifierKind::kLocal || !o.kv_cache.empty()) j["kv_cache"] = o.kv_cache.empty() ? "f32" : o.kv_cache;
  const bool server = o.verifier == VerifierKind::kServer;
  const bool streamed = server && find_drafter(o.drafter).has(kDraftsNothing) && o.fallback_target_dir.empty();  // cloud-ar
  add_json<TimingStats>(j, s);
  add_json<TargetStats>(j, s);
  if (!streamed) add_json<DraftStats>(j, s);
  if (server) {
    add_json<LinkStats>(j, s);
    add_json<FaultStats>(j, s);
  }
  if (o.predraft) add_json<PredraftStats>(j, s);
  return j;
}

// The choices the flags make: an alias (--mode) alone, or --verifier,
// --drafter and --predraft with defaults from what else was given.
ClientOptions choose_mode(const GenerateArgs& a) {
  ClientOptions o;
  if (!a.mode.empty()) {
    if (!a.verifier.empty() || !a.drafter.empty() || a.predraft)
      throw Error("generate: --mode " + a.mode + " is an alias of a verifier and a drafter; give either --mode or "
                  "--verifier/--drafter/--predraft, not both");
    return with_mode(o, parse_mode(a.mode));
  }
  o.verifier = !a.verifier.empty() ? parse_verifier(a.verifier)
               : a.server.empty()  ? VerifierKind::kLocal
                                   : VerifierKind::kServer;
  o.drafter = !a.drafter.empty() ? a.drafter : a.draft_dir.empty() ? "none" : "model";
  o.predraft = a.predraft;
  for (const std::string& kv : a.drafter_options) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throw Error("generate: --drafter-option takes KEY=VALUE, got '" + kv + "'");
    o.drafter_options[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!a.lut.empty()) {
    if (o.drafter != "lut") throw Error("generate: --lut gives the lut drafter its tables; the drafter is " + o.drafter);
    o.drafter_options["tables"] = a.lut;
  }
  return o;
}

nlohmann::json result_json(const Result& r, const ClientOptions& o, const std::string& mode, bool has_text) {
  return {
      {"mode", mode},
      {"verifier", verifier_name(o.verifier)},
      {"drafter", o.drafter},
      {"predraft", o.predraft},
      {"prompt_ids", r.prompt_ids},
      {"output_ids", r.ids},
      {"text", has_text ? nlohmann::json(r.text) : nlohmann::json(nullptr)},
      {"finish_reason", r.finish_reason},
      {"stats", stats_json(r.stats, o)},
      {"emulated", emulation_note(r.stats)},
  };
}

void print_summary(const Result& r, const ClientOptions& o, const std::string& mode) {
  const Stats& s = r.stats;
  std::cerr << "[" << mode << "] " << s.new_tokens << " tokens, " << s.wall_ms << " ms, " << s.ms_per_token
            << " ms/token, " << s.target_forwards << " target forwards";
  if (!find_drafter(o.drafter).has(kDraftsNothing))
    std::cerr << ", " << s.rounds << " rounds, tau " << s.tau << ", acceptance " << s.acceptance_rate << ", "
              << s.tree_nodes << " nodes/round";
  if (s.provisional_tokens)
    std::cerr << ", " << s.provisional_kept << "/" << s.provisional_tokens << " provisional tokens kept";
  if (s.weight_memory_peak)
    std::cerr << ", " << s.weight_bytes_read / 1e6 << " MB of weights read, peak weight memory "
              << s.weight_memory_peak / 1e6 << " MB";
  if (o.predraft) std::cerr << ", cache miss rate " << s.cache_miss_rate << ", avg exit " << s.avg_exit_layer;
  std::cerr << ", finish: " << r.finish_reason;
  if (const std::string note = emulation_note(s); !note.empty()) std::cerr << " [" << note << "]";
  std::cerr << "\n";
}

// One generation per line of a prompts file, with one client (models loaded
// once): a JSON line each with --json, else each output on its own line. A
// prompt the client refuses is reported and the others still run.
int run_prompts_file(const GenerateArgs& a, const ClientOptions& o, Client& client, const Request& req,
                     const std::string& mode) {
  const std::vector<PromptRecord> prompts = read_prompt_records(a.prompts_file, 0);
  int failed = 0;
  int64_t tokens = 0;
  double ms = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const PromptRecord& p = prompts[i];
    try {
      const Result r = p.ids.empty() ? client.generate(p.text, req) : client.generate_ids(p.ids, req);
      tokens += r.stats.new_tokens;
      ms += r.stats.wall_ms;
      if (a.json) {
        nlohmann::json j = result_json(r, o, mode, p.ids.empty() || !r.text.empty());
        j["index"] = i;
        if (!p.category.empty()) j["category"] = p.category;
        std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
      } else {
        std::cout << r.text << std::endl;
      }
    } catch (const Error& e) {
      ++failed;
      if (a.json) std::cout << nlohmann::json{{"index", i}, {"error", e.what()}}.dump() << std::endl;
      std::cerr << a.prompts_file << ": prompt " << i << ": " << e.what() << "\n";
    }
  }
  std::cerr << "[" << mode << "] " << prompts.size() - failed << " of " << prompts.size() << " prompts, " << tokens
            << " tokens, " << (tokens ? ms / static_cast<double>(tokens) : 0.0) << " ms/token\n";
  return failed ? 1 : 0;
}

int run_generate(const GenerateArgs& a) {
  ClientOptions o = choose_mode(a);
  o.server = a.server;
  o.draft_dir = a.draft_dir;
  o.target_dir = a.target_dir;
  o.tokenizer = a.tokenizer;
  o.chat_template = a.chat_template;
  o.threads = a.threads;
  o.predraft_threads = a.predraft_threads;
  o.predraft_queue = a.predraft_queue;
  o.predraft_adaptive = a.predraft_adaptive;
  o.emulate_draft_factor = a.emulate_draft_factor;
  o.memory_budget = a.memory_budget;
  o.device = a.device;
  o.kv_cache = a.kv_cache;
  o.dtype = a.dtype;
  o.stream_pipeline = !a.no_pipeline;
  o.stream_read_ahead = a.read_ahead;
  if (o.drafter == "model-tree") {
    // The tree flags are model-tree's drafter options; --drafter-option wins.
    TreeOptions t = a.tree;
    t.fallback = !a.no_fallback;
    t.provisional = !a.no_provisional;
    for (auto& [key, value] : t.options()) o.drafter_options.insert({key, value});
  }
  o.reconnect_budget = std::chrono::milliseconds(static_cast<int64_t>(a.reconnect_budget_s * 1000));
  o.fallback_target_dir = a.fallback_target;
  o.strict_numerics = a.strict_numerics;
  o.failback_interval = std::chrono::milliseconds(static_cast<int64_t>(a.failback_interval_s * 1000));
  o.tls_ca = a.tls_ca;
  o.tls_cert = a.tls_cert;
  o.tls_key = a.tls_key;
  o.tls_server_name = a.tls_server_name;
  o.auth_token_file = a.auth_token_file;
  o.allow_insecure_tokens = a.allow_insecure_tokens;
  if (const char* token = std::getenv("SPLITSPEC_AUTH_TOKEN"); token && a.auth_token_file.empty()) o.auth_token = token;
  std::unique_ptr<Client> client = Client::connect(o);
  Request req = a.request;
  req.deadline = std::chrono::milliseconds(static_cast<int64_t>(a.deadline_s * 1000));
  req.round_timeout = std::chrono::milliseconds(static_cast<int64_t>(a.round_timeout_s * 1000));
  const std::string mode = mode_name(o);
  if (!a.prompts_file.empty()) return run_prompts_file(a, o, *client, req, mode);

  if (!a.chat.empty() || !a.system.empty()) {
    if (a.text_prompt || !a.prompt_ids.empty()) throw Error("generate: give --chat or a prompt, not both");
    if (!a.system.empty()) req.messages.push_back({"system", a.system});
    req.messages.push_back({"user", a.chat});
  }
  const bool text = a.text_prompt || !req.messages.empty();
  Result r;
  if (text) {
    r = client->generate(a.text_prompt ? a.prompt : std::string(), req, [&](const std::string& piece) {
      if (!a.json) std::cout << piece << std::flush;
    });
  } else {
    r = client->generate_ids(a.prompt_ids, req);
  }
  const bool has_text = text || !r.text.empty();
  if (a.json) {
    // A model's text need not be UTF-8 (byte tokens): JSON replaces what is not.
    std::cout << result_json(r, o, mode, has_text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << std::endl;
  } else {
    if (!text) {
      if (has_text)
        std::cout << r.text;
      else
        for (size_t i = 0; i < r.ids.size(); ++i) std::cout << (i ? "," : "") << r.ids[i];
    }
    std::cout << std::endl;
    print_summary(r, o, mode);
  }
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  std::string drafter_help = "What proposes tokens each round:";
  for (const DrafterInfo& d : drafters()) drafter_help += "\n  " + d.name + ": " + d.summary;
  drafter_help += "\nDefault: model with --draft, else none";
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Generate text. A mode is a verifier (the target here, or on a server) and a drafter (nothing, a draft "
      "model's chain, or its token tree); every mode gives exactly what the target alone would");
  cmd->add_option("--verifier", a->verifier,
                  "Where the target verifies: local (here, --target) or server (--server). Default: server with "
                  "--server, else local")
      ->check(CLI::IsMember({"local", "server"}));
  cmd->add_option("--drafter", a->drafter, drafter_help);
  cmd->add_flag("--predraft", a->predraft,
                "Server verifier: pre-draft the next round on the server's early-exit verdicts (edge-fsd)");
  cmd->add_option("--drafter-option", a->drafter_options, "A drafter's own setting, KEY=VALUE (repeatable)");
  cmd->add_option("--lut", a->lut,
                  "lut: look-up tables to start from (splitspec train lut); default: lut.safetensors beside the "
                  "target (or the tokenizer's directory) if there, else empty; none: empty");
  cmd->add_option("--mode", a->mode,
                  "An alias instead: local-ar (local+none), local-sd (local+model), local-tree (local+model-tree), "
                  "cloud-ar (server+none), edge-sd (server+model), edge-fsd (server+model --predraft)")
      ->check(CLI::IsMember({"local-ar", "local-sd", "local-tree", "cloud-ar", "edge-sd", "edge-fsd"}));
  auto* model = cmd->add_option("--target,--model", a->target_dir,
                                "Local verifier: the target: a .gguf file, or a directory (Hugging Face's or ours: config.json, "
                                "model.safetensors, tokenizer.json or tokenizer.model)");
  cmd->add_option("--draft", a->draft_dir, "Drafters with a draft model (model, model-tree): its .gguf file or directory");
  cmd->add_option("--memory-budget", a->memory_budget,
                  "Local verifier: most memory the target's weights may take, e.g. 8MiB, 4MB or 25% (of its weights as "
                  "stored in its files); "
                  "the rest streams from disk per forward with O_DIRECT. Default: load it whole");
  cmd->add_option("--device", a->device,
                  "Local verifier: where the target computes: cpu (default), or cuda[:N] for GPU N (builds with the "
                  "CUDA backend): the reference for a GPU server, whose output every mode against it must equal");
  cmd->add_option("--dtype", a->dtype,
                  "Convert the local target's and the draft's weights at load: f32, f16, bf16, q8_0, q4_0, q4_1, "
                  "q5_0, q5_1, iq4_nl, or llama.cpp's mixes q4_k_m, q5_k_m, q3_k_m, q2_k, q6_k (default: as stored; "
                  "a --fallback-target stays as stored, as the server's)");
  cmd->add_option("--kv-cache", a->kv_cache,
                  "The local target's KV cache: f32 (default) or f16, half the memory; greedy output is then exactly "
                  "the target's with an f16 cache. A --fallback-target takes the server's type");
  cmd->add_flag("--no-pipeline", a->no_pipeline,
                "streamed target: read each matrix when the forward reaches it (Std) instead of reading ahead (StdPL)");
  cmd->add_option("--read-ahead", a->read_ahead,
                  "streamed target with pipeline: file bytes the loader may read ahead of the forward, taken from "
                  "the budget, e.g. 2MiB or 8%; default two layers as stored, or what the budget has left");
  cmd->add_flag("--no-fallback", a->no_fallback,
                "model-tree: verify trees of --tree-nodes instead of when the tree's confidence falls below alpha");
  cmd->add_flag("--no-provisional", a->no_provisional,
                "model-tree: do not draft on while the target's weights load");
  cmd->add_option("--tree-nodes", a->tree.tree_nodes, "model-tree without fallback: nodes per tree")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--max-tree-nodes", a->tree.max_tree_nodes, "model-tree: most nodes per tree (the server's max_draft_tokens caps it there)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--alpha", a->tree.initial_alpha, "model-tree: initial fallback threshold alpha, in (0, 1]")->capture_default_str();
  cmd->add_option("--max-children", a->tree.max_children, "model-tree: greedy alternatives a node offers")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--draft-width", a->tree.draft_width, "model-tree: tree nodes drafted together in one draft forward")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--max-provisional", a->tree.max_provisional, "model-tree: most provisional tokens per verification")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  cmd->add_option("--server", a->server, "Server verifier: splitspec-server HOST:PORT");
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer for text (default: the local model's)");
  auto* prompt = cmd->add_option("--prompt", a->prompt,
                                 "Prompt text; tokenized as llama.cpp does: BOS if the model's vocabulary adds one, "
                                 "special tokens' texts (<|im_start|>) as those tokens");
  auto* chat = cmd->add_option("--chat", a->chat,
                               "Instead of --prompt: a user message, written into the model's chat template");
  cmd->add_option("--system", a->system, "--chat: a system message before it");
  cmd->add_option("--chat-template", a->chat_template,
                  "--chat: a built-in template (llama3, chatml, phi3, llama2, gemma) instead of the one the model "
                  "names (GGUF tokenizer.chat_template, tokenizer_config.json)");
  cmd->add_option("--stop", a->request.stop,
                  "Stop once the text holds this string (repeatable); it is left out of the output");
  auto* ids = cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt as comma-separated token ids, used verbatim")
                  ->delimiter(',');
  auto* file = cmd->add_option("--prompts-file", a->prompts_file,
                               "JSONL, one generation per line: {\"prompt\": text}, {\"prompt_ids\": [ids]} or "
                               "Spec-Bench's {\"turns\": [text, ...]} (the first turn); one JSON line per prompt with --json");
  prompt->excludes(ids)->excludes(file)->excludes(chat);
  ids->excludes(prompt)->excludes(file)->excludes(chat);
  file->excludes(prompt)->excludes(ids)->excludes(chat);
  cmd->add_option("--max-new-tokens", a->request.max_new_tokens, "Tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  add_speculative_flags(cmd, a->request);
  cmd->add_option("--predraft-threads", a->predraft_threads, "--predraft: worker threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--predraft-queue", a->predraft_queue, "--predraft: order of early verdicts: priority, fifo or random")
      ->capture_default_str()
      ->check(CLI::IsMember({"priority", "fifo", "random"}));
  cmd->add_flag("--predraft-adaptive", a->predraft_adaptive,
                "--predraft: only while it measurably pays, not every round");
  cmd->add_option("--emulate-draft-factor", a->emulate_draft_factor,
                  "Emulate a slower edge device: every drafting step takes this many times its measured time "
                  "(1: real); tokens are unchanged, times are labelled emulated")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1000.0));
  cmd->add_option("--temperature", a->request.temperature, "Sampling temperature; 0 is greedy")->capture_default_str();
  cmd->add_option("--top-k", a->request.top_k, "Keep the k most likely tokens; 0 keeps all")->capture_default_str();
  cmd->add_option("--top-p", a->request.top_p, "Nucleus sampling mass in (0, 1]; 1 keeps all")->capture_default_str();
  cmd->add_option("--seed", a->request.seed, "Random seed for sampling")->capture_default_str();
  cmd->add_flag("--ignore-eos", a->request.ignore_eos, "Keep generating after the end-of-sequence token");
  cmd->add_option("--deadline-s", a->deadline_s, "Give up on the generation after this many seconds")->capture_default_str();
  cmd->add_option("--round-timeout-s", a->round_timeout_s,
                  "Server verifier: a round with no verdict after this many seconds counts as a broken stream "
                  "(reconnect, then --fallback-target); 0: only the deadline")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--reconnect-budget-s", a->reconnect_budget_s,
                  "Server verifier: after a broken stream, how long to wait for the server and resume from the "
                  "committed tokens; 0: fail at once")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--fallback-target", a->fallback_target,
                  "Server verifier: the server's target on this device (streamed under --memory-budget if given); "
                  "rounds go on here while the server is unreachable, and return when it serves again");
  cmd->add_flag("--strict-numerics", a->strict_numerics,
                "--fallback-target: refuse a fallback that computes with other numerics than the server (its backend, "
                "arithmetic or kernels, e.g. a GPU server); without it such a failover goes on, warned, and its "
                "generations are marked mixed_numerics");
  cmd->add_option("--failback-interval-s", a->failback_interval_s,
                  "--fallback-target: how often to ask the server's health while verifying locally")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--tls-ca", a->tls_ca, "Server verifier: speak TLS, trusting servers this PEM CA signed");
  cmd->add_option("--tls-cert", a->tls_cert, "Server verifier: this client's PEM certificate (mutual TLS; with --tls-key)");
  cmd->add_option("--tls-key", a->tls_key, "Server verifier: the PEM key of --tls-cert");
  cmd->add_option("--tls-server-name", a->tls_server_name,
                  "Server verifier: the name the server's certificate carries, when not the address's host");
  cmd->add_option("--auth-token-file", a->auth_token_file,
                  "Server verifier: a file whose first line is the bearer token to send (or set SPLITSPEC_AUTH_TOKEN)");
  cmd->add_flag("--allow-insecure-tokens", a->allow_insecure_tokens,
                "Send the token without TLS too (a network you trust): by default a token needs --tls-ca");
  cmd->add_flag("--json", a->json,
                "Print one JSON object with ids, text and stats (rounds, tau, draft_ms, verify_wait_ms, "
                "network_rtt_ms, ...) instead of streaming text");
  cmd->add_option("--threads", a->threads, "Compute threads (LibTorch and OpenBLAS); default (0): OMP_NUM_THREADS if set, else the physical cores")
      ->capture_default_str();
  return {cmd, [a, prompt, ids, file, model, chat]() {
            if (prompt->count() + ids->count() + file->count() + chat->count() == 0)
              throw Error("generate: give --prompt, --chat, --prompt-ids or --prompts-file");
            const ClientOptions o = choose_mode(*a);
            if (o.verifier == VerifierKind::kLocal && model->count() == 0)
              throw Error("generate: " + mode_name(o) + " needs --target DIR");
            a->text_prompt = prompt->count() > 0;
            return run_generate(*a);
          }};
}

}  // namespace splitspec::cli

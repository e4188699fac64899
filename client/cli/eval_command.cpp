#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <nlohmann/json.hpp>

#include "client/cli/commands.h"
#include "client/client.h"
#include "client/cli/prompts.h"
#include "client/cli/svg_plot.h"
#include "common/backend/cpu_backend.h"
#include "client/local_verifier.h"
#include "client/round_loop.h"
#include "common/drafting/model_drafter.h"
#include "common/drafting/assistant_head.h"
#include "common/drafting/eagle3_head.h"
#include "common/drafting/mtp_head.h"
#include "common/drafting/shortlist_options.h"
#include "common/early_exit/early_exit_eval.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/train/corpus.h"
#include "common/train/perplexity.h"
#include "common/train/train_threads.h"
#include "common/util/error.h"
#include "client/cli/speculative_flags.h"

namespace splitspec::cli {

namespace {

struct EvalArgs {
  std::string model_dir, text;
  int64_t seq_len = 256;
  std::string draft_dir, target_dir, prompts;
  SpeculativeParams speculative;  // --gamma
  int32_t max_prompts = 0;
  int32_t max_new_tokens = 64;
  float temperature = 1.0f;
  uint64_t seed = 0;
  int threads = 0;
  bool json = false;
  int64_t windows = 48;
  std::string plot;
  std::string ids_file, out;
  std::string head;  // eval eagle3 and assistant: the head's GGUF file
  std::string corpus;             // eval shortlist: the text ranked
  std::vector<int64_t> shortlist_sizes{1024, 4096, 16384, 32768};
};


// Median milliseconds of a one-token decode step after a context of up to
// 64 tokens.
double step_ms(const Model& m) {
  const int64_t context = std::min<int64_t>(64, m.config().max_position_embeddings - 1);
  KVCache cache = m.new_cache(context + 1);
  ForwardRequest r;
  for (int64_t i = 0; i < context; ++i) r.tokens.push_back(static_cast<int32_t>((i * 7 + 3) % m.config().vocab_size));
  m.forward(r, cache);
  std::vector<double> ms;
  r.tokens = {static_cast<int32_t>(5 % m.config().vocab_size)};
  for (int i = 0; i < 41; ++i) {
    cache.truncate(context);
    auto t0 = std::chrono::steady_clock::now();
    m.forward(r, cache);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

int run_ppl(const EvalArgs& a) {
  set_training_threads(a.threads);
  auto model = Model::load(a.model_dir);
  Tokenizer tok(a.model_dir);
  const auto tokens = tokenize_corpus(a.text, tok, static_cast<int32_t>(model->config().bos_token_id));
  const double ppl = perplexity(*model, tokens, a.seq_len);
  if (a.json)
    std::cout << nlohmann::json{{"perplexity", ppl}, {"tokens", tokens.size()}}.dump() << std::endl;
  else
    std::cout << "perplexity " << ppl << " over " << tokens.size() << " tokens\n";
  return 0;
}

int run_acceptance(const EvalArgs& a) {
  set_training_threads(a.threads);
  auto target = Model::load(a.target_dir);
  auto draft = Model::load(a.draft_dir);
  Tokenizer tok(a.target_dir);
  if (Tokenizer(a.draft_dir).fingerprint() != tok.fingerprint())
    throw Error("draft and target tokenizers differ (" + a.draft_dir + ", " + a.target_dir + ")");
  if (tok.vocab_size() > target->config().vocab_size)
    throw Error(a.target_dir + ": tokenizer has " + std::to_string(tok.vocab_size()) + " pieces but vocab_size is " +
                std::to_string(target->config().vocab_size));
  const auto prompts = read_prompts(a.prompts, a.max_prompts);

  nlohmann::json modes = nlohmann::json::object();
  for (bool greedy : {true, false}) {
    GenerateOptions o;
    o.max_new_tokens = a.max_new_tokens;
    o.ignore_eos = true;
    o.sampling.temperature = greedy ? 0.0f : a.temperature;
    // Summed as a client sums generations (Stats +=), every position up to gamma listed.
    Stats total;
    total.proposed_per_position.assign(a.speculative.gamma, 0);
    total.accepted_per_position.assign(a.speculative.gamma, 0);
    LocalVerifier verifier(std::make_shared<CpuBackend>(target));
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::vector<int32_t> ids = tok.encode(prompts[i]);
      ids.insert(ids.begin(), static_cast<int32_t>(target->config().bos_token_id));
      // Keep room to generate: long prompts are cut to their last tokens.
      const int64_t keep = target->config().max_position_embeddings - a.max_new_tokens - a.speculative.gamma - 1;
      if (static_cast<int64_t>(ids.size()) > keep) ids.erase(ids.begin() + 1, ids.end() - (keep - 1));
      o.sampling.seed = a.seed + i;
      ModelDrafter drafter(draft);
      RoundLoopOptions lo;
      lo.generate = o;
      lo.speculative = a.speculative;
      RoundLoopResult r = run_round_loop(drafter, verifier, ids, lo);
      r.stats.new_tokens = static_cast<int64_t>(r.ids.size());
      static_cast<DrafterCounts&>(r.stats) = drafter.stats();
      total += r.stats;
    }
    modes[greedy ? "greedy" : "sampled"] = {
        {"tau", total.tau}, {"acceptance_per_position", total.acceptance_per_position}, {"rounds", total.rounds}};
  }
  const double tp = step_ms(*draft), tq = step_ms(*target);
  const nlohmann::json out = {{"tau", modes["greedy"]["tau"]},
                              {"acceptance_per_position", modes["greedy"]["acceptance_per_position"]},
                              {"c", tp / tq},
                              {"prompts", prompts.size()},
                              {"gamma", a.speculative.gamma},
                              {"T_p_ms", tp},
                              {"T_q_ms", tq},
                              {"sampled", modes["sampled"]}};
  if (a.json) {
    std::cout << out.dump() << std::endl;
    return 0;
  }
  std::printf("%zu prompts, gamma %d, %d new tokens each\n", prompts.size(), a.speculative.gamma, a.max_new_tokens);
  for (const char* m : {"greedy", "sampled"}) {
    std::printf("%-8s tau %.3f  acceptance per position:", m, modes[m]["tau"].get<double>());
    for (double p : modes[m]["acceptance_per_position"]) std::printf(" %.3f", p);
    std::printf("\n");
  }
  std::printf("T_p (draft step) %.3f ms, T_q (target step) %.3f ms, c = T_p/T_q = %.3f\n", tp, tq, tp / tq);
  return 0;
}

// The paper's Fig. 7 for our target: per exit, how often its top token is the
// final layer's, and its mean top probability.
int run_exits(const EvalArgs& a) {
  set_training_threads(a.threads);
  auto model = Model::load(a.model_dir);
  std::optional<EarlyExits> exits = EarlyExits::load(a.model_dir, model->config());
  if (!exits) throw Error(a.model_dir + ": no early_exits.json (train them with splitspec train exits)");
  Tokenizer tok(a.model_dir);
  const std::vector<int32_t> tokens = tokenize_corpus(a.text, tok, static_cast<int32_t>(model->config().bos_token_id));
  const std::vector<ExitQuality> q = evaluate_exits(CpuBackend(*model), *exits, tokens, a.seq_len, a.windows);
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const ExitQuality& e : q)
      rows.push_back({{"after_layer", e.after_layer}, {"match_rate", e.match_rate}, {"mean_confidence", e.mean_confidence}});
    std::cout << nlohmann::json{{"exits", rows}, {"layers", model->config().num_hidden_layers}}.dump() << std::endl;
  } else {
    std::printf("| exit after layer | match with final | mean confidence |\n|---|---|---|\n");
    for (const ExitQuality& e : q)
      std::printf("| %lld of %lld | %.3f | %.3f |\n", static_cast<long long>(e.after_layer),
                  static_cast<long long>(model->config().num_hidden_layers), e.match_rate, e.mean_confidence);
  }
  if (!a.plot.empty()) {
    std::vector<std::string> x;
    Series match{"match rate", {}}, conf{"mean confidence", {}};
    for (const ExitQuality& e : q) {
      x.push_back(std::to_string(e.after_layer));
      match.y.push_back(e.match_rate);
      conf.y.push_back(e.mean_confidence);
    }
    write_line_chart_svg(a.plot, "Early exits of " + model->name(), "exit after layer", x, {match, conf});
    std::cerr << "eval exits: wrote " << a.plot << "\n";
  }
  return 0;
}

// Every position's logits of each sequence (one forward a sequence, all
// rows), as raw float32 rows of the vocabulary, back to back: what another
// engine's logits are compared with (tests/families/quant_files_test.py).
int run_logits(const EvalArgs& a) {
  set_training_threads(a.threads);
  auto model = Model::load(a.model_dir);
  const std::vector<PromptRecord> records = read_prompt_records(a.ids_file, 0);
  std::ofstream out(a.out, std::ios::binary);
  if (!out) throw Error(a.out + ": cannot write the logits");
  int64_t rows = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    if (records[i].ids.empty())
      throw Error(a.ids_file + ": line " + std::to_string(i + 1) + " has no \"prompt_ids\" (eval logits takes ids)");
    KVCache cache = model->new_cache(static_cast<int64_t>(records[i].ids.size()));
    ForwardRequest r;
    r.tokens = records[i].ids;
    const Rows logits = model->forward(r, cache).logits;
    out.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(logits.rows() * logits.cols() * sizeof(float)));
    rows += logits.rows();
  }
  if (!out.flush()) throw Error(a.out + ": write failed");
  std::cout << nlohmann::json{{"sequences", records.size()}, {"rows", rows}, {"vocab", model->config().vocab_size}}.dump()
            << std::endl;
  return 0;
}

// What eval mtp, eagle3 and assistant share: each sequence of the ids file
// through the target (`want` adds to its request what the head reads), the
// target's greedy next token, then the head's first step from that forward
// and the cache it filled (`first`) and each next from the draft before (`step`): gamma greedy drafts, printed
// as {"next", "drafts"}, and each draft step's logits written as float32
// rows (tests/families/qwen35_test.py and eagle3_test.py hold them to
// llama.cpp's draft-mtp and draft-eagle3). In float, where the drafters round
// the target's rows through half precision as the wire does.
int run_head_drafts(const EvalArgs& a, const Model& target, const std::function<void(ForwardRequest&)>& want,
                    const std::function<HeadStep(const std::vector<int32_t>& ids, int32_t next, const ForwardResult&,
                                                 const KVCache& target_cache)>& first,
                    const std::function<HeadStep(int32_t token, const Rows& hidden)>& step) {
  const std::vector<PromptRecord> records = read_prompt_records(a.ids_file, 0);
  std::ofstream out(a.out, std::ios::binary);
  if (!out) throw Error(a.out + ": cannot write the logits");
  const int64_t V = target.config().vocab_size;
  for (size_t i = 0; i < records.size(); ++i) {
    const std::vector<int32_t>& ids = records[i].ids;
    if (ids.empty()) throw Error(a.ids_file + ": line " + std::to_string(i + 1) + " has no \"prompt_ids\"");
    const int64_t P = static_cast<int64_t>(ids.size());
    KVCache cache = target.new_cache(P);
    ForwardRequest r;
    r.tokens = ids;
    r.logits_rows = std::vector<int64_t>{P - 1};
    want(r);
    const ForwardResult t = target.forward(r, cache);
    const int32_t next = greedy_token(t.logits.row(0), V);
    HeadStep s = first(ids, next, t, cache);
    std::vector<int32_t> drafts;
    for (int32_t k = 0; k < a.speculative.gamma; ++k) {
      if (k > 0) s = step(drafts.back(), s.hidden);
      out.write(reinterpret_cast<const char*>(s.logits.data()), static_cast<std::streamsize>(V * sizeof(float)));
      drafts.push_back(greedy_token(s.logits.row(0), V));
    }
    std::cout << nlohmann::json{{"next", next}, {"drafts", drafts}}.dump() << std::endl;
  }
  if (!out.flush()) throw Error(a.out + ": write failed");
  return 0;
}

// A model's own MTP drafts: token q with the target's final hidden state at
// q - 1 (zeros before the first), as the mtp drafter pairs them.
int run_mtp(const EvalArgs& a) {
  set_training_threads(a.threads);
  auto target = Model::load(a.model_dir);
  auto head = MtpHead::load(a.model_dir);
  const int64_t H = target->config().hidden_size;
  KVCache mtp = head->new_cache();
  return run_head_drafts(
      a, *target,
      [](ForwardRequest& r) {
        r.final_hidden = true;
        for (int64_t q = 0; q + 1 < static_cast<int64_t>(r.tokens.size()); ++q) r.final_hidden_rows.push_back(q);
      },
      [&](const std::vector<int32_t>& ids, int32_t next, const ForwardResult& t, const KVCache&) {
        const int64_t P = static_cast<int64_t>(ids.size());
        Rows h(P + 1, H);
        std::fill(h.row(0), h.row(0) + H, 0.0f);
        if (P > 1) std::memcpy(h.row(1), t.final_hidden_rows.data(), static_cast<size_t>((P - 1) * H) * sizeof(float));
        std::memcpy(h.row(P), t.final_hidden.data(), static_cast<size_t>(H) * sizeof(float));
        std::vector<int32_t> tokens(ids);
        tokens.push_back(next);
        mtp.truncate(0);
        return head->forward(tokens, h, mtp);
      },
      [&](int32_t token, const Rows& h) { return head->forward({token}, h, mtp); });
}

// An EAGLE-3 head's drafts: entry k reads token k + 1 with the fused inputs
// of its three target layers at k, as the eagle3 drafter pairs them; logits
// over the target's vocabulary, -inf outside the draft vocabulary.
int run_eagle3(const EvalArgs& a) {
  set_training_threads(a.threads);
  auto target = Model::load(a.model_dir);
  auto head = Eagle3Head::load(a.head, a.model_dir);
  const int64_t H = target->config().hidden_size, L = target->config().num_hidden_layers;
  KVCache decoder = head->new_cache();
  return run_head_drafts(
      a, *target,
      [&](ForwardRequest& r) {
        for (int64_t q = 0; q < static_cast<int64_t>(r.tokens.size()); ++q) r.final_hidden_rows.push_back(q);
        for (int32_t l : head->target_layers())
          if (l < L) r.hidden_layers.push_back(l - 1);
      },
      [&](const std::vector<int32_t>& ids, int32_t next, const ForwardResult& t, const KVCache&) {
        const int64_t P = static_cast<int64_t>(ids.size());
        Rows features(P, 3 * H);
        for (int64_t q = 0; q < P; ++q)
          for (size_t k = 0; k < 3; ++k) {
            const int32_t l = head->target_layers()[k];
            const float* x = l == L ? t.final_hidden_rows.row(q) : t.hidden.at(l - 1).row(q);
            std::memcpy(features.row(q) + k * H, x, static_cast<size_t>(H) * sizeof(float));
          }
        std::vector<int32_t> tokens(ids.begin() + 1, ids.end());
        tokens.push_back(next);
        decoder.truncate(0);
        return head->forward(tokens, head->fuse(features), decoder);
      },
      [&](int32_t token, const Rows& g) { return head->forward({token}, g, decoder); });
}

// Gemma 4's assistant drafts: the next token with the target's final hidden
// state before it, at its position, over the target's keys and values of
// the two layers the assistant reads; each draft at that position again,
// with the assistant's own state, as the assistant drafter runs them.
int run_assistant(const EvalArgs& a) {
  set_training_threads(a.threads);
  auto target = Model::load(a.model_dir);
  auto head = AssistantHead::load(a.head, a.model_dir);
  KVCache store = head->new_store();
  int64_t P = 0;
  return run_head_drafts(
      a, *target, [](ForwardRequest& r) { r.final_hidden = true; },
      [&](const std::vector<int32_t>& ids, int32_t next, const ForwardResult& t, const KVCache& cache) {
        P = static_cast<int64_t>(ids.size());
        // The target's keys of the forward just run, read back as the
        // verifier hands them over.
        store.truncate(0);
        store.reserve(P);
        const std::vector<int32_t>& layers = head->target_kv_layers();
        for (size_t j = 0; j < layers.size(); ++j) {
          const int64_t w = store.layer_kv_width(static_cast<int64_t>(j));
          std::vector<float> k(static_cast<size_t>(P * w)), v(k.size());
          cache.read_rows(layers[j], 0, P, k.data(), v.data());
          store.write_rows(static_cast<int64_t>(j), k.data(), v.data(), P);
        }
        store.commit(P);
        return head->forward({next}, t.final_hidden.view(), P, store);
      },
      [&](int32_t token, const Rows& h) { return head->forward({token}, h.view(), P, store); });
}

// The tokens of --corpus ranked by count (written to --out), and what share
// of --text's tokens the first K of them hold: the most a shortlist of K
// lets a head's drafts be accepted, on that text.
int run_shortlist(const EvalArgs& a) {
  const Tokenizer tok(a.model_dir);
  auto read = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error("eval shortlist: cannot read " + path);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::vector<int32_t> ranked = rank_tokens(read(a.corpus), tok);
  std::vector<int64_t> rank(static_cast<size_t>(tok.vocab_size()), -1);
  for (size_t i = 0; i < ranked.size(); ++i) rank[static_cast<size_t>(ranked[i])] = static_cast<int64_t>(i);
  int64_t total = 0;
  std::vector<int64_t> held(a.shortlist_sizes.size(), 0);
  std::istringstream lines(read(a.text));
  for (std::string line; std::getline(lines, line);)
    for (int32_t id : tok.encode(line)) {
      ++total;
      const int64_t r = id >= 0 && id < tok.vocab_size() ? rank[static_cast<size_t>(id)] : -1;
      for (size_t k = 0; k < held.size(); ++k) held[k] += r >= 0 && r < a.shortlist_sizes[k];
    }
  if (!a.out.empty()) {
    std::ofstream f(a.out);
    f << nlohmann::json(ranked).dump() << "\n";
    if (!f) throw Error("eval shortlist: cannot write " + a.out);
  }
  nlohmann::json rows = nlohmann::json::array();
  for (size_t k = 0; k < held.size(); ++k)
    rows.push_back({{"k", a.shortlist_sizes[k]},
                    {"coverage", total ? static_cast<double>(held[k]) / static_cast<double>(total) : 0.0}});
  if (a.json) {
    std::cout << nlohmann::json{{"vocab_size", tok.vocab_size()}, {"ranked_tokens", ranked.size()},
                                {"text_tokens", total}, {"shortlists", rows}}
                     .dump()
              << "\n";
    return 0;
  }
  std::printf("vocabulary %d, %zu tokens seen in the corpus, %lld in the text\n", tok.vocab_size(), ranked.size(),
              static_cast<long long>(total));
  std::printf("| shortlist | share of the text's tokens in it |\n|---|---|\n");
  for (const auto& r : rows) std::printf("| %lld | %.4f |\n", static_cast<long long>(r["k"].get<int64_t>()), r["coverage"].get<double>());
  return 0;
}

}  // namespace

Command add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* eval = app.add_subcommand("eval", "Evaluate models: perplexity, speculative acceptance");
  eval->require_subcommand(1);
  CLI::App* ppl = eval->add_subcommand("ppl", "Perplexity of a model on a text file");
  ppl->add_option("--target,--model", a->model_dir, "Model directory")->required();
  ppl->add_option("--text", a->text, "Text file (documents separated by blank lines)")->required();
  ppl->add_option("--seq-len", a->seq_len, "Window length")->capture_default_str();
  ppl->add_flag("--json", a->json, "Print {\"perplexity\", \"tokens\"}");
  ppl->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores");
  CLI::App* acc = eval->add_subcommand("acceptance", "Greedy and sampled chain speculation over prompts");
  acc->add_option("--draft", a->draft_dir, "Draft model directory")->required();
  acc->add_option("--target,--model", a->target_dir, "Target model directory")->required();
  acc->add_option("--prompts", a->prompts, "JSONL prompts (turns[0] is used, as in spec_bench.jsonl)")->required();
  add_speculative_flags(acc, a->speculative);
  acc->add_option("--max-prompts", a->max_prompts, "Use only the first N prompts; 0 uses all")->capture_default_str();
  acc->add_option("--max-new-tokens", a->max_new_tokens, "Tokens generated per prompt")->capture_default_str();
  acc->add_option("--temperature", a->temperature, "Temperature of the sampled run")->capture_default_str();
  acc->add_option("--seed", a->seed, "Seed of the sampled run")->capture_default_str();
  acc->add_flag("--json", a->json,
                R"(Print {"tau", "acceptance_per_position", "c", "prompts", ...} (greedy; "sampled" nested))");
  acc->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores");
  CLI::App* ex = eval->add_subcommand("exits", "Early exits: match rate with the final layer and mean confidence per exit");
  ex->add_option("--target,--model", a->model_dir, "Target directory with early_exits.json")->required();
  ex->add_option("--text", a->text, "Held-out text")->required();
  ex->add_option("--seq-len", a->seq_len, "Window length")->capture_default_str();
  ex->add_option("--windows", a->windows, "Windows evaluated")->capture_default_str();
  ex->add_option("--plot", a->plot, "Also draw the table as an SVG line chart here");
  ex->add_flag("--json", a->json, R"(Print {"exits": [{"after_layer", "match_rate", "mean_confidence"}], "layers"})");
  ex->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores");
  CLI::App* lg = eval->add_subcommand(
      "logits", "Every position's logits of token sequences, as raw float32 rows, to compare with another engine");
  lg->add_option("--target,--model", a->model_dir, "Model directory or GGUF file")->required();
  lg->add_option("--ids-file", a->ids_file, "JSONL of {\"prompt_ids\": [ids]}, one sequence a line")
      ->required()
      ->check(CLI::ExistingFile);
  lg->add_option("--out", a->out, "File to write: each sequence's rows of vocab_size float32s, in order")->required();
  lg->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores");
  CLI::App* mtp = eval->add_subcommand(
      "mtp", "A model's own MTP drafts after token sequences, with each draft step's logits as raw float32 rows");
  mtp->add_option("--target,--model", a->model_dir, "GGUF file carrying an MTP block")->required();
  mtp->add_option("--ids-file", a->ids_file, "JSONL of {\"prompt_ids\": [ids]}, one sequence a line")
      ->required()
      ->check(CLI::ExistingFile);
  mtp->add_option("--out", a->out, "File to write: each draft step's vocab_size float32s, in order")->required();
  add_speculative_flags(mtp, a->speculative);
  mtp->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores");
  CLI::App* e3 = eval->add_subcommand(
      "eagle3", "An EAGLE-3 head's drafts after token sequences, with each draft step's logits as raw float32 rows");
  e3->add_option("--target,--model", a->model_dir, "The target's GGUF file")->required();
  e3->add_option("--head", a->head, "The EAGLE-3 head's GGUF file (llama.cpp's draft-eagle3 layout)")->required();
  e3->add_option("--ids-file", a->ids_file, "JSONL of {\"prompt_ids\": [ids]}, one sequence a line")
      ->required()
      ->check(CLI::ExistingFile);
  e3->add_option("--out", a->out, "File to write: each draft step's vocab_size float32s, in order")->required();
  add_speculative_flags(e3, a->speculative);
  e3->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores");
  CLI::App* as = eval->add_subcommand(
      "assistant", "Gemma 4 assistant drafts after token sequences, with each draft step's logits as raw float32 rows");
  as->add_option("--target,--model", a->model_dir, "The Gemma 4 target's GGUF file")->required();
  as->add_option("--head", a->head, "The assistant's GGUF file (llama.cpp's gemma4-assistant)")->required();
  as->add_option("--ids-file", a->ids_file, "JSONL of {\"prompt_ids\": [ids]}, one sequence a line")
      ->required()
      ->check(CLI::ExistingFile);
  as->add_option("--out", a->out, "File to write: each draft step's vocab_size float32s, in order")->required();
  add_speculative_flags(as, a->speculative);
  as->add_option("--threads", a->threads, "Compute threads; default (0): OMP_NUM_THREADS if set, else the physical cores");
  CLI::App* sl = eval->add_subcommand(
      "shortlist", "Rank a corpus's tokens for a head's shortlist (drafter option ranking=) and say what share of a "
                   "held-out text's tokens the first K hold");
  sl->add_option("--target,--model,--tokenizer", a->model_dir, "The target's GGUF file or directory (its tokenizer)")
      ->required();
  sl->add_option("--corpus", a->corpus, "Text whose tokens are ranked by count")->required()->check(CLI::ExistingFile);
  sl->add_option("--text", a->text, "Held-out text to measure")->required()->check(CLI::ExistingFile);
  sl->add_option("--k", a->shortlist_sizes, "Shortlist sizes")->delimiter(',')->capture_default_str();
  sl->add_option("--out", a->out, "Write the ranking here (a JSON array of ids, most frequent first)");
  sl->add_flag("--json", a->json, R"(Print {"vocab_size", "ranked_tokens", "text_tokens", "shortlists": [{"k", "coverage"}]})");
  return {eval, [a, ppl, ex, lg, mtp, e3, as, sl]() {
            if (sl->parsed()) return run_shortlist(*a);
            if (ex->parsed()) return run_exits(*a);
            if (lg->parsed()) return run_logits(*a);
            if (mtp->parsed()) return run_mtp(*a);
            if (e3->parsed()) return run_eagle3(*a);
            if (as->parsed()) return run_assistant(*a);
            return ppl->parsed() ? run_ppl(*a) : run_acceptance(*a);
          }};
}

}  // namespace splitspec::cli

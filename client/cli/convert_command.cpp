// `splitspec convert`: a model at another weight type, to GGUF for llama.cpp,
// or from GGUF. `splitspec tokenize`: text to ids and back, as generate does.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "client/cli/commands.h"
#include "common/model/family.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/vocab.h"
#include "common/util/error.h"
#include "common/weights/gguf.h"
#include "common/convert/gguf_convert.h"
#include "common/model/gguf_model.h"

namespace fs = std::filesystem;

namespace splitspec::cli {

namespace {

struct ConvertArgs {
  std::string model_dir;
  std::string random_config;
  std::string tokenizer;
  uint64_t seed = 1234;
  float scale = 0.02f;
  std::string from_gguf;
  std::string out_dir;
  std::string to_gguf;
  std::string dtype;
};

int run_convert(const ConvertArgs& a) {
  const std::optional<WType> type = a.dtype.empty() ? std::nullopt : std::optional<WType>(parse_weight_type(a.dtype));
  const std::string gguf_in = !a.from_gguf.empty() ? a.from_gguf : is_gguf_file(a.model_dir) ? a.model_dir : "";
  if (!gguf_in.empty() && !a.out_dir.empty()) {
    import_gguf(gguf_in, a.out_dir, type);
    std::cerr << "wrote " << a.out_dir << " (config.json, model.safetensors, tokenizer.json or tokenizer.model) from "
              << gguf_in << "\n";
    return 0;
  }
  if (!a.to_gguf.empty() && a.random_config.empty()) {
    export_gguf(a.model_dir, a.to_gguf, type);
    std::cerr << "wrote " << a.to_gguf << "\n";
    return 0;
  }
  if (!a.random_config.empty()) {
    // A model of any size and family for benchmarks and tests: random
    // weights, a real tokenizer.
    const ModelConfig c = load_model_config(a.random_config);
    // A tokenizer.json directory: its vocabulary within the config's rows.
    const bool hf_json = fs::is_directory(a.tokenizer) && !fs::exists(fs::path(a.tokenizer) / "tokenizer.model") &&
                         fs::exists(fs::path(a.tokenizer) / "tokenizer.json");
    if (hf_json) {
      const Vocab vocab = Vocab::from_hf_dir(a.tokenizer, c.vocab_size);
      if (vocab.size() != c.vocab_size)
        throw Error("convert: the tokenizer has " + std::to_string(vocab.size()) + " pieces, the config a vocabulary of " +
                    std::to_string(c.vocab_size));
      const auto m = Model::random(c, a.seed, WType::F32, a.scale);
      if (!a.to_gguf.empty()) {
        write_gguf(m->config(), m->weight_set(), fs::path(a.to_gguf).stem().string(),
                   [&](GgufWriter& g) { vocab.add_to_gguf(g); }, a.to_gguf, type);
      } else {
        vocab.write_hf(a.out_dir);
        m->save(a.out_dir, type);
      }
      std::cerr << "wrote " << (a.to_gguf.empty() ? a.out_dir : a.to_gguf) << ": random weights (seed " << a.seed
                << ") for " << a.random_config << "\n";
      return 0;
    }
    const Tokenizer tok(a.tokenizer);
    if (tok.vocab_size() != c.vocab_size)
      throw Error("convert: the tokenizer has " + std::to_string(tok.vocab_size()) + " pieces, the config a vocabulary of " +
                  std::to_string(c.vocab_size));
    const auto m = Model::random(c, a.seed, WType::F32, a.scale);
    if (!a.to_gguf.empty() && !is_gguf_file(a.tokenizer)) {
      // A SentencePiece tokenizer goes into GGUF the way a model directory's
      // does: through one, written aside.
      const fs::path src = fs::is_directory(a.tokenizer) ? fs::path(a.tokenizer) / "tokenizer.model" : fs::path(a.tokenizer);
      if (!fs::is_regular_file(src))
        throw Error("convert: --random-init --to-gguf takes a GGUF vocabulary or a tokenizer.model; " + src.string() +
                    " is neither");
      const fs::path aside = fs::path(a.to_gguf).concat(".dir.tmp");
      struct Remove {
        fs::path p;
        ~Remove() { std::error_code ec; fs::remove_all(p, ec); }
      } remove{aside};
      fs::create_directories(aside);
      m->save(aside.string());
      fs::copy_file(src, aside / "tokenizer.model", fs::copy_options::overwrite_existing);
      export_gguf(aside.string(), a.to_gguf, type);
      std::cerr << "wrote " << a.to_gguf << ": random weights (seed " << a.seed << ") for " << a.random_config << "\n";
      return 0;
    }
    if (!a.to_gguf.empty()) {
      const GgufFile vocab(a.tokenizer);
      write_gguf(m->config(), m->weight_set(), fs::path(a.to_gguf).stem().string(),
                 [&](GgufWriter& g) { copy_gguf_tokenizer(vocab, g); }, a.to_gguf, type);
      std::cerr << "wrote " << a.to_gguf << ": random weights (seed " << a.seed << ") for " << a.random_config << "\n";
      return 0;
    }
    if (is_gguf_file(a.tokenizer)) {
      write_vocabulary_files(GgufFile(a.tokenizer), c.vocab_size, a.out_dir);
      m->save(a.out_dir, type);
      std::cerr << "wrote " << a.out_dir << ": random weights (seed " << a.seed << ") for " << a.random_config << "\n";
      return 0;
    }
    if (!tokenizer_available(a.tokenizer) || !fs::exists(fs::is_directory(a.tokenizer) ? fs::path(a.tokenizer) / "tokenizer.model" : fs::path(a.tokenizer)))
      throw Error("convert: --random-init --out takes tokenizer.model or a GGUF vocabulary; got " + a.tokenizer);
    m->save(a.out_dir, type);
    const fs::path src = fs::is_directory(a.tokenizer) ? fs::path(a.tokenizer) / "tokenizer.model" : fs::path(a.tokenizer);
    fs::copy_file(src, fs::path(a.out_dir) / "tokenizer.model", fs::copy_options::overwrite_existing);
    std::cerr << "wrote " << a.out_dir << ": random weights (seed " << a.seed << ") for " << a.random_config << "\n";
    return 0;
  }
  if (fs::exists(a.out_dir) && fs::equivalent(a.out_dir, a.model_dir))
    throw Error("convert: --out must not be the model's own directory");
  const auto m = Model::load(a.model_dir, type);
  m->save(a.out_dir);
  // The tokenizer's files as they are, whichever form the directory keeps.
  if (tokenizer_available(a.model_dir)) copy_vocabulary(a.model_dir, m->config().vocab_size, a.out_dir);
  std::cerr << "wrote " << a.out_dir << " (config.json, model.safetensors and the tokenizer's files); drafters trained "
            << "for the source (early exits, lut tables, recurrent head) are not copied\n";
  return 0;
}

struct TokenizeArgs {
  std::string tokenizer;
  std::string text;
  std::vector<int32_t> ids;
  bool no_bos = false;
  bool json = false;
};

int run_tokenize(const TokenizeArgs& a, bool decode) {
  const Tokenizer tok(a.tokenizer);
  if (decode) {
    for (int32_t id : a.ids)
      if (id < 0 || id >= tok.vocab_size())
        throw Error("tokenize: id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(tok.vocab_size()));
    const std::string text = tok.decode(a.ids);
    if (a.json)
      std::cout << nlohmann::json{{"ids", a.ids}, {"text", text}, {"fingerprint", tok.fingerprint()}}.dump(-1, ' ', false,
                                                                    nlohmann::json::error_handler_t::replace)
                << std::endl;
    else
      std::cout << text << std::endl;
    return 0;
  }
  // As generate --prompt: BOS if the vocabulary adds one, special tokens'
  // texts as those tokens.
  const std::vector<int32_t> ids = tok.tokenize(a.text, !a.no_bos, true);
  if (a.json) {
    // The fingerprint a server compares: the same vocabulary in every form
    // (GGUF, tokenizer.json, tokenizer.model, tokenizer.gguf) gives one.
    std::cout << nlohmann::json{{"ids", ids}, {"count", ids.size()}, {"fingerprint", tok.fingerprint()}}.dump() << std::endl;
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
    std::cout << std::endl;
  }
  return 0;
}

}  // namespace

Command add_convert_command(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Write a model at another weight type, as GGUF for llama.cpp, or from GGUF. Q4_0 models keep their LM head "
      "at Q8_0; norms stay fp32");
  auto* model = cmd->add_option("--target,--model", a->model_dir, "Model directory to convert");
  auto* from = cmd->add_option("--from", a->from_gguf, "A GGUF file to read (" + family_names() +
      "; F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS tensors)");
  auto* random = cmd->add_option("--random-init", a->random_config,
                                 "Instead: a model of this config.json with random weights, for benchmarks (with --tokenizer)")
                     ->check(CLI::ExistingFile);
  auto* tok = cmd->add_option("--tokenizer", a->tokenizer,
                              "--random-init: the tokenizer (a model directory, tokenizer.model, or a GGUF file such as "
                              "llama.cpp's ggml-vocab-*.gguf)");
  cmd->add_option("--seed", a->seed, "--random-init: the weights' seed")->capture_default_str();
  cmd->add_option("--scale", a->scale, "--random-init: the weights' standard deviation")->capture_default_str();
  auto* out = cmd->add_option("--out", a->out_dir, "Directory to write the model to");
  auto* gguf = cmd->add_option("--to-gguf", a->to_gguf, "GGUF file to write the model to");
  cmd->add_option("--dtype", a->dtype,
                  "Weight type to write: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, or llama.cpp's mixes "
                  "q4_k_m, q5_k_m, q3_k_m, q2_k, q6_k, with its fallback types for rows that are not whole super-blocks "
                  "(default: as stored)");
  model->excludes(from)->excludes(random);
  from->excludes(model)->excludes(random);
  random->excludes(model)->excludes(from);
  out->excludes(gguf);
  gguf->excludes(out);
  cmd->footer(
      "Examples:\n"
      "  splitspec convert --target models/demo-target --dtype q4_0 --out /tmp/target-q4_0\n"
      "  splitspec convert --target models/demo-target --to-gguf /tmp/target.gguf\n"
      "  splitspec convert --target model.gguf --dtype q4_k_m --to-gguf /tmp/model-Q4_K_M.gguf\n"
      "  splitspec convert --from model.gguf --out /tmp/model\n"
      "  splitspec convert --random-init configs/bench-50m.json --tokenizer models/demo-target --out /tmp/b50");
  return {cmd, [a, model, from, random, tok, out, gguf]() {
            if (model->count() + from->count() + random->count() != 1)
              throw Error("convert: give --target DIR, --from FILE.gguf or --random-init CONFIG");
            if (random->count() && !tok->count()) throw Error("convert: --random-init needs --tokenizer");
            if (out->count() + gguf->count() != 1) throw Error("convert: give --out DIR or --to-gguf FILE");
            if (from->count() && gguf->count()) throw Error("convert: --from reads GGUF; write it with --out DIR");
            return run_convert(*a);
          }};
}

Command add_tokenize_command(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Text to token ids as generate --prompt tokenizes it (as llama.cpp does: BOS if the vocabulary adds one, special "
      "tokens parsed), or ids back to text");
  cmd->add_option("--target,--model,--tokenizer", a->tokenizer,
                  "A .gguf file, a model directory (tokenizer.gguf, tokenizer.model or tokenizer.json) or tokenizer.model")
      ->required();
  auto* text = cmd->add_option("--text", a->text, "Text to tokenize");
  auto* ids = cmd->add_option("--ids", a->ids, "Comma-separated ids to decode")->delimiter(',');
  text->excludes(ids);
  ids->excludes(text);
  cmd->add_flag("--no-bos", a->no_bos, "Add no BOS (nor EOS) id");
  cmd->add_flag("--json", a->json, "Print JSON (with the vocabulary's fingerprint)");
  return {cmd, [a, text, ids]() {
            if ((text->count() > 0) == (ids->count() > 0)) throw Error("tokenize: give --text or --ids");
            return run_tokenize(*a, ids->count() > 0);
          }};
}

}  // namespace splitspec::cli

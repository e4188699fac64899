#include "common/tokenizer/tokenizer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/tokenizer/sentencepiece_backend.h"
#include "common/tokenizer/sentencepiece_process.h"
#include "common/tokenizer/vocab.h"
#include "common/util/error.h"
#include "common/util/fnv1a.h"
#include "common/util/sanitizers.h"
#include "common/util/shipped_files.h"
#include "common/weights/gguf.h"

namespace fs = std::filesystem;

namespace splitspec {

namespace {

// Loads the isolated sentencepiece module once per process.
CreateSentencePieceBackend sentencepiece_factory() {
  static CreateSentencePieceBackend factory = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("SPLITSPEC_SENTENCEPIECE_MODULE")) candidates.push_back(env);
    for (const auto& c : shipped_file_candidates(kSentencePieceModuleName)) candidates.push_back(c);
    candidates.push_back(kSentencePieceModuleName);  // the loader's own search path
    for (const auto& path : candidates) {
      if (path.find('/') != std::string::npos && !fs::exists(path)) continue;
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!handle) {
        error += std::string("\n  ") + dlerror();
        continue;
      }
      factory = reinterpret_cast<CreateSentencePieceBackend>(dlsym(handle, kCreateSentencePieceBackendSymbol));
      if (factory) return;
      error += "\n  " + path + ": no symbol " + kCreateSentencePieceBackendSymbol;
    }
  });
  if (!factory) throw Error(std::string("cannot load the sentencepiece module ") + kSentencePieceModuleName + error);
  return factory;
}

std::unique_ptr<SentencePieceBackend> make_backend() {
  std::string choice;
  if (const char* env = std::getenv("SPLITSPEC_TOKENIZER_BACKEND")) choice = env;
  if (choice.empty()) choice = kDeepBindRefused ? "process" : "module";
  if (choice == "module") return std::unique_ptr<SentencePieceBackend>(sentencepiece_factory()());
  if (choice == "process") return start_sentencepiece_process(find_shipped_program(kSentencePieceServeName, "the tokenizer helper"));
  throw Error("SPLITSPEC_TOKENIZER_BACKEND=" + choice + ": expected module or process");
}

// U+FFFD, which SentencePiece emits for bytes that do not form a whole character yet.
constexpr const char* kReplacement = "\xEF\xBF\xBD";

// The length of `s` without a trailing UTF-8 sequence that its lead byte says
// is not complete yet.
size_t complete_prefix(const std::string& s) {
  size_t i = s.size();
  // A character is at most 4 bytes: look back past up to 3 continuation bytes.
  for (size_t back = 0; back < 4 && i > 0; ++back) {
    const auto b = static_cast<uint8_t>(s[--i]);
    if ((b & 0xC0) == 0x80) continue;
    const size_t need = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
    return s.size() - i >= need ? s.size() : i;
  }
  return s.size();
}

}  // namespace

std::string config_chat_template(const std::string& dir) {
  const fs::path config = fs::path(dir) / "tokenizer_config.json";
  if (!fs::exists(config)) return {};
  std::ifstream in(config);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    const auto j = nlohmann::json::parse(ss.str());
    if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string())
      return j["chat_template"].get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(config.string() + ": not valid JSON: " + e.what());
  }
  return {};
}

Tokenizer::Tokenizer(const std::string& path) {
  fs::path p(path);
  if (fs::is_directory(p)) {
    // tokenizer.gguf (a vocabulary neither file below can hold, kept in
    // llama.cpp's own form), then tokenizer.model (the models SplitSpec
    // trained keep their tokens), then tokenizer.json.
    if (fs::exists(p / kVocabFileName)) {
      p /= kVocabFileName;
    } else if (!fs::exists(p / "tokenizer.model") && fs::exists(p / "tokenizer.json")) {
      vocab_ = std::make_unique<Vocab>(Vocab::from_hf_dir(p.string()));
      fingerprint_ = vocab_->fingerprint();
      return;
    } else {
      chat_template_ = config_chat_template(p.string());
      p /= "tokenizer.model";
    }
  }
  if (p.extension() == ".gguf") {
    if (!fs::exists(p)) throw Error(p.string() + ": tokenizer file not found");
    vocab_ = std::make_unique<Vocab>(Vocab::from_gguf(GgufFile(p.string())));
    fingerprint_ = vocab_->fingerprint();
    return;
  }
  if (!fs::exists(p)) throw Error(p.string() + ": tokenizer file not found");
  sp_ = make_backend();
  const std::string err = sp_->load(p.string());
  if (!err.empty()) throw Error(p.string() + ": cannot load SentencePiece model: " + err);
  fingerprint_ = fnv1a_hex(sp_->serialized_model());
}

Tokenizer::~Tokenizer() = default;

const char* Tokenizer::kind() const {
  if (!vocab_) return "spm-file";
  return vocab_->kind() == Vocab::Kind::kSpm ? "spm" : "bpe";
}

std::vector<int32_t> Tokenizer::tokenize(const std::string& text, bool add_special, bool parse_special,
                                         const std::vector<std::pair<size_t, size_t>>* literal) const {
  if (vocab_) return vocab_->tokenize(text, add_special, parse_special, literal);
  std::vector<int32_t> ids;
  if (add_special && bos_id() >= 0) ids.push_back(bos_id());
  const auto body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

bool Tokenizer::add_bos() const { return vocab_ ? vocab_->add_bos() : bos_id() >= 0; }

std::vector<int32_t> Tokenizer::eog_ids() const {
  if (vocab_) return vocab_->eog_ids();
  return eos_id() >= 0 ? std::vector<int32_t>{eos_id()} : std::vector<int32_t>{};
}

bool Tokenizer::is_eog(int32_t id) const { return vocab_ ? vocab_->is_eog(id) : id >= 0 && id == eos_id(); }

std::string Tokenizer::chat_template() const { return vocab_ ? vocab_->chat_template() : chat_template_; }

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  if (vocab_) return vocab_->token_to_piece(id, special);
  // SentencePiece decodes a lone piece without its leading space and gives
  // control pieces no text.
  return decode({id});
}

std::string Tokenizer::stream_text(const std::vector<int32_t>& ids) const {
  return vocab_ ? vocab_->stream_text(ids) : decode(ids);
}

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  if (vocab_) return vocab_->tokenize(text, false, false);
  std::vector<int> ids;
  const std::string err = sp_->encode(text, &ids);
  if (!err.empty()) throw Error("tokenizer: encode failed: " + err);
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  if (vocab_) return vocab_->detokenize(ids, false, false);
  const int n = sp_->piece_size();
  std::vector<int> v;
  v.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= n) throw Error("tokenizer: token id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(n));
    v.push_back(id);
  }
  std::string out;
  const std::string err = sp_->decode(v, &out);
  if (!err.empty()) throw Error("tokenizer: decode failed: " + err);
  return out;
}

bool tokenizer_available(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return fs::exists(fs::path(path) / "tokenizer.model", ec) || fs::exists(fs::path(path) / "tokenizer.json", ec) ||
           fs::exists(fs::path(path) / kVocabFileName, ec);
  if (!fs::is_regular_file(path, ec)) return false;
  // A GGUF file need not carry a vocabulary.
  return !is_gguf_file(path) || GgufFile(path).has("tokenizer.ggml.model");
}

void train_tokenizer(const TokenizerTrainOptions& o) {
  std::error_code ec;
  if (!fs::is_regular_file(o.corpus)) throw Error(o.corpus + ": corpus file not found");
  if (fs::file_size(o.corpus, ec) == 0) throw Error(o.corpus + ": corpus is empty");
  if (o.vocab_size < 260) throw Error("vocab size must be at least 260 (3 special pieces + 256 byte pieces + 1)");
  fs::create_directories(o.out_dir, ec);
  if (ec || !fs::is_directory(o.out_dir)) throw Error(o.out_dir + ": cannot create output directory");
  const std::string prefix = (fs::path(o.out_dir) / "tokenizer").string();
  {
    std::ofstream probe(prefix + ".model.probe");
    if (!probe) throw Error(o.out_dir + ": output directory is not writable");
  }
  fs::remove(prefix + ".model.probe", ec);
  // Flags mirror Llama 2's tokenizer: BPE, digits split, byte fallback, no
  // normalisation beyond what the text has.
  const std::string flags = "--input=" + o.corpus + " --model_prefix=" + prefix +
                            " --model_type=bpe --vocab_size=" + std::to_string(o.vocab_size) +
                            " --byte_fallback=true --split_digits=true --character_coverage=0.9995"
                            " --normalization_rule_name=identity --remove_extra_whitespaces=false --hard_vocab_limit=false"
                            " --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --max_sentence_length=16384"
                            " --input_sentence_size=" + std::to_string(o.max_sentences) +
                            " --shuffle_input_sentence=true --num_threads=" + std::to_string(o.threads) +
                            " --minloglevel=2";
  const std::string helper = find_shipped_program(kSentencePieceTrainerName, "the tokenizer trainer");
  std::vector<std::string> args = {helper};
  std::istringstream words(flags);
  for (std::string w; words >> w;) args.push_back(w);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The trainer's messages go to a log so that a failure can say why.
  const std::string log = prefix + ".train.log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, helper.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) throw Error(helper + ": cannot start: " + std::strerror(spawned));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string reason, line;
    std::ifstream in(log);
    while (std::getline(in, line))
      if (!line.empty() && line.find("LOG(INFO)") == std::string::npos) reason = line;
    throw Error("tokenizer training failed: " + (reason.empty() ? "status " + std::to_string(WEXITSTATUS(status)) : reason));
  }
  fs::remove(log, ec);
  if (!fs::exists(prefix + ".model")) throw Error("tokenizer training wrote no " + prefix + ".model");
  fs::remove(prefix + ".vocab", ec);  // the .model holds everything we load
}

int32_t Tokenizer::vocab_size() const { return vocab_ ? vocab_->size() : sp_->piece_size(); }
int32_t Tokenizer::bos_id() const { return vocab_ ? vocab_->bos_id() : sp_->bos_id(); }
int32_t Tokenizer::eos_id() const { return vocab_ ? vocab_->eos_id() : sp_->eos_id(); }

TextStreamer::TextStreamer(const Tokenizer& tok, std::vector<int32_t> context)
    : tok_(tok), ids_(std::move(context)), context_chars_(tok.stream_text(ids_).size()) {}

std::string TextStreamer::push(int32_t id) {
  ids_.push_back(id);
  std::string all = tok_.stream_text(ids_);
  if (all.size() < context_chars_ + emitted_.size()) return {};
  std::string fresh = all.substr(context_chars_ + emitted_.size());
  // Hold back a trailing partial character until its remaining bytes arrive:
  // SentencePiece shows it as U+FFFD, a vocabulary gives the raw bytes.
  if (tok_.vocab_) {
    fresh.resize(complete_prefix(fresh));
  } else {
    const size_t rl = std::char_traits<char>::length(kReplacement);
    while (fresh.size() >= rl && fresh.compare(fresh.size() - rl, rl, kReplacement) == 0) {
      fresh.resize(fresh.size() - rl);
    }
  }
  emitted_ += fresh;
  return fresh;
}

std::string TextStreamer::finish() {
  std::string all = tok_.stream_text(ids_);
  if (all.size() <= context_chars_ + emitted_.size()) return {};
  std::string rest = all.substr(context_chars_ + emitted_.size());
  emitted_ += rest;
  return rest;
}

}  // namespace splitspec

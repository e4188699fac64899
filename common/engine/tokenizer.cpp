#include "common/engine/tokenizer.h"

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
#include <sstream>

#include "common/util/error.h"
#include "common/util/sanitizers.h"
#include "common/engine/sentencepiece_backend.h"
#include "common/engine/sentencepiece_process.h"
#include "common/engine/shipped_files.h"

namespace fs = std::filesystem;

namespace splitspec {

namespace {

std::string fnv1a_hex(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

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

}  // namespace

Tokenizer::Tokenizer(const std::string& path) : sp_(make_backend()) {
  fs::path p(path);
  if (fs::is_directory(p)) p /= "tokenizer.model";
  if (!fs::exists(p)) throw Error(p.string() + ": tokenizer file not found");
  const std::string err = sp_->load(p.string());
  if (!err.empty()) throw Error(p.string() + ": cannot load SentencePiece model: " + err);
  fingerprint_ = fnv1a_hex(sp_->serialized_model());
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const std::string err = sp_->encode(text, &ids);
  if (!err.empty()) throw Error("tokenizer: encode failed: " + err);
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
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

int32_t Tokenizer::vocab_size() const { return sp_->piece_size(); }
int32_t Tokenizer::bos_id() const { return sp_->bos_id(); }
int32_t Tokenizer::eos_id() const { return sp_->eos_id(); }

TextStreamer::TextStreamer(const Tokenizer& tok, std::vector<int32_t> context)
    : tok_(tok), ids_(std::move(context)), context_chars_(tok.decode(ids_).size()) {}

std::string TextStreamer::push(int32_t id) {
  ids_.push_back(id);
  std::string all = tok_.decode(ids_);
  if (all.size() < context_chars_ + emitted_.size()) return {};
  std::string fresh = all.substr(context_chars_ + emitted_.size());
  // Hold back a trailing partial character until its remaining bytes arrive.
  const size_t rl = std::char_traits<char>::length(kReplacement);
  while (fresh.size() >= rl && fresh.compare(fresh.size() - rl, rl, kReplacement) == 0) {
    fresh.resize(fresh.size() - rl);
  }
  emitted_ += fresh;
  return fresh;
}

std::string TextStreamer::finish() {
  std::string all = tok_.decode(ids_);
  if (all.size() <= context_chars_ + emitted_.size()) return {};
  std::string rest = all.substr(context_chars_ + emitted_.size());
  emitted_ += rest;
  return rest;
}

}  // namespace splitspec

#include "client/tokenizer_fetch.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "client/server_link.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/cache_dir.h"
#include "common/util/error.h"

namespace splitspec {

namespace fs = std::filesystem;

namespace {

// Far above any vocabulary (Gemma's 262K tokens are under 20 MB as GGUF):
// a server announcing more is not sending a tokenizer.
constexpr uint64_t kMaxBytes = 256ull << 20;

// The cached file's fingerprint, or "" when it is missing or unreadable.
std::string cached_fingerprint(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return {};
  try {
    return Tokenizer(file.string()).fingerprint();
  } catch (const Error&) {
    return {};
  }
}

}  // namespace

std::string tokenizer_cache_dir() { return user_cache_dir("tokenizers"); }

std::string fetch_server_tokenizer(ServerLink& link, const std::string& cache_dir, std::chrono::milliseconds timeout) {
  const std::string want = link.info().tokenizer_fingerprint();
  if (want.empty()) throw link.error("its target ships no tokenizer (GetInfo names no fingerprint)");
  // The fingerprint names the file: hex digits only, so never a path.
  if (want.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw link.error("its tokenizer fingerprint '" + want + "' is not a hex digest");
  const fs::path file = fs::path(cache_dir) / (want + ".gguf");
  if (cached_fingerprint(file) == want) return file.string();

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  auto reader = link.stub().GetTokenizer(&ctx, v1::GetTokenizerRequest{});
  v1::TokenizerChunk chunk;
  std::string data, announced_fp;
  uint64_t total = 0;
  bool first = true;
  std::string broken;
  while (broken.empty() && reader->Read(&chunk)) {
    if (first) {
      first = false;
      total = chunk.total_bytes();
      announced_fp = chunk.fingerprint();
      if (total == 0 || total > kMaxBytes) broken = "announced a tokenizer of " + std::to_string(total) + " bytes";
      else if (announced_fp != want)
        broken = "sent the tokenizer " + announced_fp + ", not the " + want + " GetInfo names";
      else data.reserve(total);
    }
    if (broken.empty() && data.size() + chunk.data().size() > total)
      broken = "sent more than the " + std::to_string(total) + " bytes of tokenizer it announced";
    if (broken.empty()) data += chunk.data();
  }
  if (!broken.empty()) ctx.TryCancel();
  const grpc::Status s = reader->Finish();
  if (!broken.empty()) throw link.error(broken);
  if (!s.ok()) throw link.error("GetTokenizer failed", s);
  if (data.size() != total)
    throw link.error("sent " + std::to_string(data.size()) + " of the " + std::to_string(total) + " bytes of tokenizer it announced");

  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  if (ec) throw Error(cache_dir + ": cannot create the tokenizer cache: " + ec.message() + " (SPLITSPEC_CACHE_DIR names another)");
  // Still a .gguf, as Tokenizer tells the forms apart by the name.
  const fs::path tmp = fs::path(cache_dir) / (want + ".tmp" + std::to_string(::getpid()) + ".gguf");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) throw Error(tmp.string() + ": cannot write the fetched tokenizer");
  }
  if (const std::string got = cached_fingerprint(tmp); got != want) {
    fs::remove(tmp, ec);
    throw link.error("sent a tokenizer whose fingerprint is " + (got.empty() ? std::string("unreadable") : got) +
                     ", not " + want);
  }
  fs::rename(tmp, file, ec);
  if (ec) throw Error(file.string() + ": cannot keep the fetched tokenizer: " + ec.message());
  spdlog::info("event=tokenizer_fetched server={} fingerprint={} bytes={} file={}", link.address(), want, total,
               file.string());
  return file.string();
}

}  // namespace splitspec

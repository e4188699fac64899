#include "common/tokenizer/sentencepiece_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "common/tokenizer/sentencepiece_wire.h"
#include "common/util/error.h"

extern char** environ;

namespace splitspec {
namespace {

namespace w = spm_wire;

class ProcessBackend final : public SentencePieceBackend {
 public:
  ProcessBackend(int fd, pid_t pid, std::string helper) : fd_(fd), pid_(pid), helper_(std::move(helper)) {}

  ~ProcessBackend() override {
    // The helper exits at end of stream.
    ::close(fd_);
    reap();
  }

  std::string load(const std::string& path) override {
    std::string request(1, w::kLoad);
    w::put_str(&request, path);
    std::string reply, err;
    if (auto failed = call(request, &reply); !failed.empty()) return failed;
    w::Reader r(reply);
    if (!r.str(&err)) return malformed();
    if (!err.empty()) return err;
    if (!r.i32(&piece_size_) || !r.i32(&bos_id_) || !r.i32(&eos_id_) || !r.str(&model_) || !r.at_end()) return malformed();
    return {};
  }

  std::string encode(const std::string& text, std::vector<int>* ids) const override {
    std::string request(1, w::kEncode);
    w::put_str(&request, text);
    std::string reply, err;
    if (auto failed = call(request, &reply); !failed.empty()) return failed;
    w::Reader r(reply);
    if (!r.str(&err) || !r.ids(ids) || !r.at_end()) return malformed();
    return err;
  }

  std::string decode(const std::vector<int>& ids, std::string* text) const override {
    std::string request(1, w::kDecode);
    w::put_ids(&request, ids);
    std::string reply, err;
    if (auto failed = call(request, &reply); !failed.empty()) return failed;
    w::Reader r(reply);
    if (!r.str(&err) || !r.str(text) || !r.at_end()) return malformed();
    return err;
  }

  int piece_size() const override { return piece_size_; }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  std::string serialized_model() const override { return model_; }

 private:
  // Empty on success, else why the helper could not answer. A helper that
  // failed once is not asked again: its stream may be mid-frame.
  std::string call(const std::string& request, std::string* reply) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!gone_.empty()) return gone_;
    if (w::send_frame(fd_, request) && w::recv_frame(fd_, reply)) return {};
    ::shutdown(fd_, SHUT_RDWR);
    gone_ = helper_ + " (pid " + std::to_string(pid_) + ") stopped answering: " + reap();
    return gone_;
  }

  std::string malformed() const { return helper_ + ": malformed reply"; }

  // Waits for the helper once; says how it ended.
  std::string reap() const {
    if (reaped_) return "ended";
    reaped_ = true;
    int status = 0;
    pid_t r;
    while ((r = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
    }
    if (r < 0) return "ended (already reaped)";
    if (WIFSIGNALED(status)) return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  }

  const int fd_;
  const pid_t pid_;
  const std::string helper_;
  int piece_size_ = 0, bos_id_ = -1, eos_id_ = -1;
  std::string model_;
  mutable std::mutex mu_;
  mutable std::string gone_;
  mutable bool reaped_ = false;
};

}  // namespace

std::unique_ptr<SentencePieceBackend> start_sentencepiece_process(const std::string& helper) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw Error(std::string("tokenizer: socketpair: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, sv[1], 0);
  posix_spawn_file_actions_adddup2(&actions, sv[1], 1);
  // Nothing else of ours, a server's listening socket say, outlives us in it.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  // Its own process group, so a terminal's Ctrl-C reaches the program, which
  // may still want to decode, and not the helper; default signal handling.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::string arg0 = helper;
  char* argv[] = {arg0.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, helper.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  if (spawned != 0) {
    ::close(sv[0]);
    throw Error("tokenizer: cannot start " + helper + ": " + std::strerror(spawned));
  }
  return std::make_unique<ProcessBackend>(sv[0], pid, helper);
}

}  // namespace splitspec

#include "bench/commands/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/util/error.h"
#include "common/util/stopwatch.h"

extern char** environ;

namespace splitspec::cli {

namespace fs = std::filesystem;

namespace {

// A free loopback port (bound, read, released): where the server's /metrics
// will listen.
int free_port(const std::string& who) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    throw Error(who + ": cannot find a free port for the server's metrics");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

std::string find_server_bin(const std::string& given, const std::string& who) {
  const std::string bin =
      given.empty() ? (fs::read_symlink("/proc/self/exe").parent_path() / "splitspec-server").string() : given;
  if (!fs::exists(bin)) throw Error(who + ": no server binary at " + bin + " (give --server-bin)");
  return bin;
}

ServerProcess::ServerProcess(const std::string& bin, const std::vector<std::string>& extra, const fs::path& dir,
                             const std::string& who)
    : metrics_port_(free_port(who)) {
  const fs::path port_file = dir / "port";
  fs::remove(port_file);
  std::vector<std::string> args = {bin,           "--listen",   "127.0.0.1:0", "--port-file", port_file.string(),
                                   "--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port_),
                                   "--log-level", "warn"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = (dir / "server.log").string();
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int rc = posix_spawn(&pid_, bin.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error(who + ": cannot start " + bin + ": " + std::strerror(rc));
  const auto until = SteadyClock::now() + std::chrono::seconds(60);
  while (!fs::exists(port_file)) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw Error(who + ": the server exited at start; its log is " + log);
    }
    if (SteadyClock::now() > until) throw Error(who + ": the server did not start within 60 s; its log is " + log);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream(port_file) >> port_;
}

ServerProcess::~ServerProcess() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
}

std::string ServerProcess::metrics() const {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(metrics_port_));
  std::string body;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[8192];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) body.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return body;
}

double ServerProcess::peak_rss_mb() const {
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

double metric_sample(const std::string& metrics, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = metrics.find(key);
  return at == std::string::npos ? 0.0 : std::strtod(metrics.c_str() + at + key.size(), nullptr);
}

}  // namespace splitspec::cli

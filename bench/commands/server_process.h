#pragma once
// A splitspec-server child process for the benches that need their own
// server (bench load: one per configuration; bench regimes: one per
// emulated accelerator), on a free loopback port, with /metrics, stopped
// with SIGTERM.
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace splitspec::cli {

// splitspec-server beside this program, or `given` when not empty; throws
// splitspec::Error naming `who` if there is none.
std::string find_server_bin(const std::string& given, const std::string& who);

class ServerProcess {
 public:
  // Runs `bin --listen 127.0.0.1:0 --port-file ... --metrics-listen ...
  // --log-level warn` plus `args`, its log in dir/server.log; returns once it
  // serves. Throws splitspec::Error (naming `who`) if it exits or takes over
  // 60 s.
  ServerProcess(const std::string& bin, const std::vector<std::string>& args, const std::filesystem::path& dir,
                const std::string& who);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // GET /metrics; "" when it cannot be read.
  std::string metrics() const;
  // The process's peak resident memory so far, from /proc.
  double peak_rss_mb() const;

 private:
  int metrics_port_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// The value of the sample `name` (with its labels) in a scrape, else 0.
double metric_sample(const std::string& metrics, const std::string& name);

}  // namespace splitspec::cli

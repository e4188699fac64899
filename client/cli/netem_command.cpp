#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "client/cli/commands.h"
#include "client/cli/netem_proxy.h"

namespace splitspec::cli {

namespace {

int run_netem(const NetemOptions& o, const std::string& port_file) {
  // Wait for SIGINT/SIGTERM in sigwait, not in a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  NetemProxy proxy(o);
  proxy.start();
  std::cout << "netem listening on port " << proxy.port() << " -> " << o.upstream << ", one-way delay " << o.delay_ms
            << " ms, jitter " << o.jitter_ms << " ms (" << o.jitter_distribution << "), rate " << (o.rate_kbps > 0 ? std::to_string(o.rate_kbps) + " kbit/s" : "unlimited")
            << ", loss " << o.loss * 100 << "% (rto " << o.rto_ms << " ms)" << std::endl;
  if (!port_file.empty()) {
    // Whole file or none: written aside, then renamed.
    std::ofstream(port_file + ".tmp") << proxy.port() << "\n";
    std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  }
  int sig = 0;
  sigwait(&signals, &sig);
  proxy.stop();
  spdlog::info("netem: stopped after {} connections, {} retransmissions", proxy.connections(), proxy.retransmissions());
  return 0;
}

}  // namespace

Command add_netem_command(CLI::App& app) {
  auto o = std::make_shared<NetemOptions>();
  auto port_file = std::make_shared<std::string>();
  auto profile = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "netem", "TCP proxy that delays and rate-limits each direction, to emulate Wi-Fi or WAN links in experiments");
  cmd->add_option("--listen", o->listen, "HOST:PORT to accept on (port 0: any free port, printed)")->capture_default_str();
  cmd->add_option("--upstream", o->upstream, "HOST:PORT to forward to (the server)")->required();
  CLI::Option* delay = cmd->add_option("--delay-ms", o->delay_ms, "One-way delay added to each direction")->capture_default_str()->check(CLI::NonNegativeNumber);
  CLI::Option* jitter = cmd->add_option("--jitter-ms", o->jitter_ms, "Jitter of the delay (order is kept)")
                             ->capture_default_str()
                             ->check(CLI::NonNegativeNumber);
  CLI::Option* distribution =
      cmd->add_option("--jitter-distribution", o->jitter_distribution,
                      "uniform (+/- jitter), normal (standard deviation jitter) or pareto (later only, heavy tail)")
          ->capture_default_str()
          ->check(CLI::IsMember(jitter_distributions()));
  cmd->add_option("--profile", *profile,
                  "A named link: " + link_profile_names() +
                      " (delay, jitter, loss and rate; docs/edge-cloud.md gives their sources); flags given as well "
                      "override its values")
      ->check(CLI::IsMember(link_profiles()));
  CLI::Option* rate = cmd->add_option("--rate-kbps", o->rate_kbps, "Bandwidth per direction in kbit/s; 0 is unlimited")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  CLI::Option* loss = cmd->add_option("--loss", o->loss,
                  "Probability that a packet is lost; TCP delivers it one --rto-ms late and holds back what follows")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--rto-ms", o->rto_ms, "Retransmission timeout a lost packet costs")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", o->seed, "Seed of the jitter and the losses")->capture_default_str();
  cmd->add_option("--port-file", *port_file, "Write the listening port to this file once accepting");
  return {cmd, [o, port_file, profile, delay, jitter, distribution, rate, loss]() {
            NetemOptions n = *o;
            if (!profile->empty()) {
              apply_link_profile(*profile, n);
              if (delay->count()) n.delay_ms = o->delay_ms;
              if (jitter->count()) n.jitter_ms = o->jitter_ms;
              if (distribution->count()) n.jitter_distribution = o->jitter_distribution;
              if (rate->count()) n.rate_kbps = o->rate_kbps;
              if (loss->count()) n.loss = o->loss;
            }
            return run_netem(n, *port_file);
          }};
}

}  // namespace splitspec::cli

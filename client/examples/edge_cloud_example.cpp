// Example: a robot controller asking for text with the SplitSpec client API.
//
//   splitspec-example --server 127.0.0.1:50051 --draft models/demo-draft [--prompt TEXT]
//
// Generates the same request three ways: on the server alone (cloud-ar), with
// drafts from this device verified by the server (edge-sd), and with the
// server's early-exit verdicts letting this device pre-draft the next round
// while the server still verifies (edge-fsd). Streams the texts, prints a
// stats table, and checks that greedy decoding gives the same tokens all ways.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "client/client.h"

namespace {

struct Args {
  std::string server = "127.0.0.1:50051";
  std::string draft = "models/demo-draft";
  std::string prompt = "The President of the United States";
  int max_new_tokens = 64;
};

void print_row(const char* mode, const splitspec::Stats& s, bool speculative) {
  std::printf("| %-8s | %6lld | %8.2f | %15lld | %14.3f |", mode, static_cast<long long>(s.new_tokens), s.ms_per_token,
              static_cast<long long>(s.target_forwards),
              s.new_tokens ? static_cast<double>(s.target_forwards) / static_cast<double>(s.new_tokens) : 0.0);
  if (speculative)
    std::printf(" %6lld | %5.2f | %10.2f | %8.1f | %14.1f | %14.2f |\n", static_cast<long long>(s.rounds), s.tau,
                s.acceptance_rate, s.draft_ms, s.verify_wait_ms, s.network_rtt_ms);
  else
    std::printf(" %6s | %5s | %10s | %8s | %14s | %14s |\n", "-", "-", "-", "-", "-", "-");
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--server") a.server = v;
    else if (k == "--draft") a.draft = v;
    else if (k == "--prompt") a.prompt = v;
    else if (k == "--max-new-tokens") a.max_new_tokens = std::stoi(v);
    else {
      std::cerr << "usage: splitspec-example [--server HOST:PORT] [--draft DIR] [--prompt TEXT] [--max-new-tokens N]\n";
      return 2;
    }
  }
  try {
    splitspec::ClientOptions edge;
    edge.mode = splitspec::Mode::kEdgeSd;
    edge.server = a.server;
    edge.draft_dir = a.draft;
    splitspec::ClientOptions cloud = edge;
    cloud.mode = splitspec::Mode::kCloudAr;  // the draft directory only lends its tokenizer
    splitspec::ClientOptions fsd = edge;
    fsd.mode = splitspec::Mode::kEdgeFsd;
    auto edge_client = splitspec::Client::connect(edge);
    auto cloud_client = splitspec::Client::connect(cloud);
    auto fsd_client = splitspec::Client::connect(fsd);
    const splitspec::ServerInfo info = edge_client->server_info();
    std::printf("server %s: model %s, vocabulary %d, context %d, tokenizer %s\n\n", a.server.c_str(),
                info.model_name.c_str(), info.vocab_size, info.max_context, info.tokenizer_fingerprint.c_str());

    splitspec::Request req;
    req.max_new_tokens = a.max_new_tokens;
    req.temperature = 0.7f;  // small models loop under greedy decoding
    req.top_k = 40;
    req.seed = 1;
    req.gamma = 3;  // edge-fsd's operating point on the demo pair (README, Measured)
    auto print = [](const std::string& piece) { std::cout << piece << std::flush; };

    std::cout << "== edge-sd: drafts from " << a.draft << ", verified by the server (sampled, seed 1)\n" << a.prompt;
    const splitspec::Result e = edge_client->generate(a.prompt, req, print);
    std::cout << "\n\n== edge-fsd: as edge-sd, pre-drafting on the server's early verdicts (sampled, seed 1)\n"
              << a.prompt;
    const splitspec::Result f = fsd_client->generate(a.prompt, req, print);
    std::cout << "\n\n== cloud-ar: the server's target alone (sampled, seed 1)\n" << a.prompt;
    const splitspec::Result c = cloud_client->generate(a.prompt, req, print);
    std::cout << "\n\n";

    std::printf("| mode     | tokens | ms/token | server forwards | forwards/token | rounds |   tau | acceptance | draft ms | verify wait ms | network rtt ms |\n");
    std::printf("|----------|--------|----------|-----------------|----------------|--------|-------|------------|----------|----------------|----------------|\n");
    print_row("cloud-ar", c.stats, false);
    print_row("edge-sd", e.stats, true);
    print_row("edge-fsd", f.stats, true);
    std::printf("\nedge-fsd: %lld early verdicts, %lld of %lld next drafts pre-drafted (cache miss rate r %.2f), "
                "Avg EE %.1f\n",
                static_cast<long long>(f.stats.early_verdicts), static_cast<long long>(f.stats.predraft_hits),
                static_cast<long long>(f.stats.predraft_lookups), f.stats.cache_miss_rate, f.stats.avg_exit_layer);

    // Exactness, shown: greedy edge-sd and edge-fsd reproduce the target token
    // for token.
    req.temperature = 0.0f;
    const splitspec::Result eg = edge_client->generate(a.prompt, req);
    const splitspec::Result fg = fsd_client->generate(a.prompt, req);
    const splitspec::Result cg = cloud_client->generate(a.prompt, req);
    const bool same = eg.ids == cg.ids && fg.ids == cg.ids;
    std::printf("\ngreedy check: edge-sd, edge-fsd and cloud-ar give %s tokens (%zu tokens; edge-sd in %lld rounds, "
                "edge-fsd in %lld)\n",
                same ? "identical" : "DIFFERENT", cg.ids.size(), static_cast<long long>(eg.stats.rounds),
                static_cast<long long>(fg.stats.rounds));
    std::printf("greedy ms/token: cloud-ar %.2f, edge-sd %.2f, edge-fsd %.2f (edge-fsd cache miss rate r %.2f)\n",
                cg.stats.ms_per_token, eg.stats.ms_per_token, fg.stats.ms_per_token, fg.stats.cache_miss_rate);
    return same ? 0 : 1;
  } catch (const std::exception& ex) {
    std::cerr << "splitspec-example: " << ex.what() << "\n";
    return 1;
  }
}

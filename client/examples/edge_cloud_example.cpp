// Example: a robot controller asking for text with the SplitSpec client API.
//
//   splitspec-example --server 127.0.0.1:50051 --draft models/demo-draft
//       [--lut models/demo-target/lut.safetensors] [--prompt TEXT]
//
// Generates the same request five ways, each a choice of verifier and
// drafter: on the server alone (cloud-ar: server + none), with drafts from
// this device verified by the server (edge-sd: server + model), with the
// server's early-exit verdicts letting this device pre-draft the next round
// while the server still verifies (edge-fsd: server + model + predraft), and
// with EdgeLLM's width-adaptive token trees sent for verification
// (server + model-tree), and with no draft model at all: DIAA's look-up
// tables of the target's own top-K, which the server's verdicts keep up to
// date (server + lut). Streams the texts, prints a stats table, and checks
// that greedy decoding gives the same tokens all ways.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <splitspec/client.h>

namespace {

struct Args {
  std::string server = "127.0.0.1:50051";
  std::string draft = "models/demo-draft";
  std::string lut = "models/demo-target/lut.safetensors";
  std::string prompt = "The President of the United States";
  int max_new_tokens = 64;
};

struct Way {
  const char* label;
  const char* drafter;
  bool predraft;
  std::unique_ptr<splitspec::Client> client;
};

void print_row(const char* mode, const splitspec::Stats& s, bool speculative) {
  std::printf("| %-17s | %6lld | %8.2f | %15lld | %14.3f |", mode, static_cast<long long>(s.new_tokens), s.ms_per_token,
              static_cast<long long>(s.target_forwards),
              s.new_tokens ? static_cast<double>(s.target_forwards) / static_cast<double>(s.new_tokens) : 0.0);
  if (speculative)
    std::printf(" %6lld | %11.1f | %5.2f | %10.2f | %8.1f | %14.1f | %14.2f |\n", static_cast<long long>(s.rounds),
                s.tree_nodes, s.tau, s.acceptance_rate, s.draft_ms, s.verify_wait_ms, s.network_rtt_ms);
  else
    std::printf(" %6s | %11s | %5s | %10s | %8s | %14s | %14s |\n", "-", "-", "-", "-", "-", "-", "-");
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--server") a.server = v;
    else if (k == "--draft") a.draft = v;
    else if (k == "--lut") a.lut = v;
    else if (k == "--prompt") a.prompt = v;
    else if (k == "--max-new-tokens") a.max_new_tokens = std::stoi(v);
    else {
      std::cerr << "usage: splitspec-example [--server HOST:PORT] [--draft DIR] [--lut FILE] [--prompt TEXT] "
                   "[--max-new-tokens N]\n";
      return 2;
    }
  }
  try {
    std::vector<Way> ways;
    ways.push_back({"cloud-ar", "none", false, nullptr});
    ways.push_back({"edge-sd", "model", false, nullptr});
    ways.push_back({"edge-fsd", "model", true, nullptr});
    ways.push_back({"server+model-tree", "model-tree", false, nullptr});
    ways.push_back({"server+lut", "lut", false, nullptr});
    for (Way& w : ways) {
      splitspec::ClientOptions o;
      o.verifier = splitspec::VerifierKind::kServer;
      o.drafter = w.drafter;  // none: the draft directory only lends its tokenizer
      o.predraft = w.predraft;
      o.server = a.server;
      o.draft_dir = a.draft;
      if (std::strcmp(w.drafter, "lut") == 0) o.drafter_options["tables"] = a.lut;
      w.client = splitspec::Client::connect(o);
    }
    const splitspec::ServerInfo info = ways[0].client->server_info();
    std::printf("server %s: model %s, vocabulary %d, context %d, tokenizer %s\n\n", a.server.c_str(),
                info.model_name.c_str(), info.vocab_size, info.max_context, info.tokenizer_fingerprint.c_str());

    splitspec::Request req;
    req.max_new_tokens = a.max_new_tokens;
    req.temperature = 0.7f;  // small models loop under greedy decoding
    req.top_k = 40;
    req.seed = 1;
    req.gamma = 3;  // edge-fsd's operating point on the demo pair (docs/edge-cloud.md)
    auto print = [](const std::string& piece) { std::cout << piece << std::flush; };
    const char* what[] = {"the server's target alone", "drafts from this device, verified by the server",
                          "as edge-sd, pre-drafting on the server's early verdicts",
                          "EdgeLLM's token trees from this device, verified by the server",
                          "DIAA's look-up tables on this device, no draft model, verified by the server"};
    std::vector<splitspec::Result> sampled;
    for (size_t i = 0; i < ways.size(); ++i) {
      std::cout << "== " << ways[i].label << ": " << what[i] << " (sampled, seed 1)\n" << a.prompt;
      sampled.push_back(ways[i].client->generate(a.prompt, req, print));
      std::cout << "\n\n";
    }

    std::printf("| mode              | tokens | ms/token | server forwards | forwards/token | rounds | nodes/round |   tau | acceptance | draft ms | verify wait ms | network rtt ms |\n");
    std::printf("|-------------------|--------|----------|-----------------|----------------|--------|-------------|-------|------------|----------|----------------|----------------|\n");
    for (size_t i = 0; i < ways.size(); ++i) print_row(ways[i].label, sampled[i].stats, i > 0);
    const splitspec::Stats& f = sampled[2].stats;
    std::printf("\nedge-fsd: %lld early verdicts, %lld of %lld next drafts pre-drafted (cache miss rate r %.2f), "
                "Avg EE %.1f\n",
                static_cast<long long>(f.early_verdicts), static_cast<long long>(f.predraft_hits),
                static_cast<long long>(f.predraft_lookups), f.cache_miss_rate, f.avg_exit_layer);

    // Exactness, shown: greedy decoding reproduces the target token for
    // token, whatever drafts and wherever.
    req.temperature = 0.0f;
    std::vector<splitspec::Result> greedy;
    for (Way& w : ways) greedy.push_back(w.client->generate(a.prompt, req));
    bool same = true;
    for (const splitspec::Result& g : greedy) same = same && g.ids == greedy[0].ids;
    std::string rounds, speed;
    for (size_t i = 0; i < ways.size(); ++i) {
      char buf[96];
      if (i > 0) {
        std::snprintf(buf, sizeof buf, "%s%s %lld", i > 1 ? ", " : "", ways[i].label,
                      static_cast<long long>(greedy[i].stats.rounds));
        rounds += buf;
      }
      std::snprintf(buf, sizeof buf, "%s%s %.2f", i > 0 ? ", " : "", ways[i].label, greedy[i].stats.ms_per_token);
      speed += buf;
    }
    std::printf("\ngreedy check: edge-sd, edge-fsd, server+model-tree, server+lut and cloud-ar give %s tokens (%zu "
                "tokens; rounds: %s)\n",
                same ? "identical" : "DIFFERENT", greedy[0].ids.size(), rounds.c_str());
    std::printf("greedy ms/token: %s (edge-fsd cache miss rate r %.2f)\n", speed.c_str(), greedy[2].stats.cache_miss_rate);
    return same ? 0 : 1;
  } catch (const std::exception& ex) {
    std::cerr << "splitspec-example: " << ex.what() << "\n";
    return 1;
  }
}

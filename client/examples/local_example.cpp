// Example: the SplitSpec client API on this device alone, no server needed.
//
//   splitspec-local-example [--target models/demo-target] [--draft models/demo-draft]
//       [--prompt-ids 1,450,6673,310 | --prompt TEXT] [--max-new-tokens 24]
//       [--temperature 0] [--seed 0] [--threads 1]
//
// The target verifies here (local verifier) what a draft model proposes
// (model drafter): local-sd. Prints the generated ids, the finish reason and
// the text, one line each:
//   ids: 281,7956,...
//   finish: length
//   text: or-bo, and the ...
// so that a script can compare the ids with `splitspec generate --json`'s.
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <splitspec/client.h>

namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) ids.push_back(static_cast<int32_t>(std::stol(item)));
  return ids;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  splitspec::ClientOptions options;
  options.verifier = splitspec::VerifierKind::kLocal;
  options.drafter = "model";
  options.target_dir = "models/demo-target";
  options.draft_dir = "models/demo-draft";
  options.threads = 1;
  splitspec::Request request;
  request.max_new_tokens = 24;
  std::string prompt;
  std::vector<int32_t> prompt_ids = {1, 450, 6673, 310};
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc || k == "--help") {
      std::cerr << "usage: splitspec-local-example [--target DIR] [--draft DIR] [--prompt-ids A,B,...] [--prompt TEXT] "
                   "[--max-new-tokens N] [--temperature T] [--seed S] [--threads N]\n";
      return k == "--help" ? 0 : 2;
    }
    const std::string v = argv[i + 1];
    try {
      if (k == "--target") options.target_dir = v;
      else if (k == "--draft") options.draft_dir = v;
      else if (k == "--prompt-ids") prompt_ids = parse_ids(v);
      else if (k == "--prompt") prompt = v;
      else if (k == "--max-new-tokens") request.max_new_tokens = std::stoi(v);
      else if (k == "--temperature") request.temperature = std::stof(v);
      else if (k == "--seed") request.seed = std::stoull(v);
      else if (k == "--threads") options.threads = std::stoi(v);
      else {
        std::cerr << "splitspec-local-example: unknown option " << k << " (--help)\n";
        return 2;
      }
    } catch (const std::exception&) {
      std::cerr << "splitspec-local-example: bad value for " << k << ": " << v << "\n";
      return 2;
    }
  }
  try {
    const auto client = splitspec::Client::connect(options);
    const splitspec::Result r =
        prompt.empty() ? client->generate_ids(prompt_ids, request) : client->generate(prompt, request);
    std::cout << "ids: " << join_ids(r.ids) << "\n"
              << "finish: " << r.finish_reason << "\n"
              << "text: " << r.text << "\n";
    std::fprintf(stderr, "%s: %lld tokens, %.2f ms/token, tau %.2f\n", splitspec::mode_name(options).c_str(),
                 static_cast<long long>(r.stats.new_tokens), r.stats.ms_per_token, r.stats.tau);
    return 0;
  } catch (const splitspec::Error& ex) {
    std::cerr << "splitspec-local-example: error: " << ex.what() << "\n";
    return 1;
  } catch (const std::exception& ex) {
    std::cerr << "splitspec-local-example: unexpected: " << ex.what() << "\n";
    return 1;
  }
}

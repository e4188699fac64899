#include "tests/edge_cloud_util.h"

#include <signal.h>

#include <gtest/gtest.h>

#include "common/util/error.h"

namespace splitspec::test {

LocalServer start_server(const std::string& target_dir, int max_sessions, int max_draft_tokens) {
  ServerConfig c;
  c.target_dir = target_dir;
  c.max_sessions = max_sessions;
  c.max_draft_tokens = max_draft_tokens;
  return start_server(std::move(c));
}

LocalServer start_server(ServerConfig c) {
  c.listen = "127.0.0.1:0";
  c.compute_threads = 1;
  c.shutdown_grace_s = 5;
  c.log_level = "warn";
  LocalServer s;
  s.server = std::make_unique<Server>(c);
  s.server->start();
  s.address = "127.0.0.1:" + std::to_string(s.server->port());
  return s;
}

v1::SessionRequest open_msg(std::vector<int32_t> prompt, int32_t vocab, float temperature) {
  v1::SessionRequest m;
  v1::GenerationRequest* o = m.mutable_open();
  o->mutable_prompt_ids()->Add(prompt.begin(), prompt.end());
  o->set_max_new_tokens(16);
  o->set_vocab_size(vocab);
  o->mutable_sampling()->set_temperature(temperature);
  return m;
}

v1::SessionRequest draft_msg(uint32_t round, std::vector<int32_t> tokens) {
  v1::SessionRequest m;
  m.mutable_draft()->set_round(round);
  m.mutable_draft()->mutable_tokens()->Add(tokens.begin(), tokens.end());
  return m;
}

grpc::Status run_session(v1::SplitSpec::Stub& stub, const std::vector<v1::SessionRequest>& msgs) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto s = stub.Session(&ctx);
  for (const auto& m : msgs)
    if (!s->Write(m)) break;
  s->WritesDone();
  v1::SessionResponse r;
  while (s->Read(&r)) {
  }
  return s->Finish();
}

namespace {

std::string spawn(const std::string& listen, const std::string& target_dir, const TempDir& tmp,
                  std::unique_ptr<Child>& child, const std::vector<std::string>& extra_args) {
  const std::string port_file = tmp.str("port");
  std::filesystem::remove(port_file);
  std::vector<std::string> argv = {std::string(SPLITSPEC_BIN_DIR) + "/splitspec-server", "--target", target_dir,
                                   "--listen", listen, "--port-file", port_file, "--threads", "1"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  child = std::make_unique<Child>(argv, tmp.str("server.out"), tmp.str("server.err"));
  if (!wait_until([&] { return std::filesystem::exists(port_file) && std::filesystem::file_size(port_file) > 0; },
                  std::chrono::seconds(60)))
    throw std::runtime_error("splitspec-server did not start: " + read_file(tmp.path() / "server.err"));
  std::string port = read_file(port_file);
  port.erase(port.find_last_not_of("\n") + 1);
  return "127.0.0.1:" + port;
}

}  // namespace

std::string spawn_server(const std::string& target_dir, const TempDir& tmp, std::unique_ptr<Child>& child,
                         const std::vector<std::string>& extra_args) {
  return spawn("127.0.0.1:0", target_dir, tmp, child, extra_args);
}

std::string spawn_server_at(const std::string& listen, const std::string& target_dir, const TempDir& tmp,
                            std::unique_ptr<Child>& child) {
  return spawn(listen, target_dir, tmp, child, {});
}

void kill_server(Child& child) {
  child.signal(SIGKILL);
  child.wait(std::chrono::seconds(10));
}

std::string restart_server_at(const std::string& listen, const std::string& target_dir, const TempDir& tmp,
                              std::unique_ptr<Child>& child) {
  try {
    spawn_server_at(listen, target_dir, tmp, child);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

ClientOptions server_options(const std::string& address, const std::string& drafter) {
  ClientOptions o;
  o.verifier = VerifierKind::kServer;
  o.drafter = drafter;
  o.server = address;
  o.draft_dir = demo_draft_dir();
  o.threads = 1;
  return o;
}

std::unique_ptr<v1::SplitSpec::Stub> raw_stub(const std::string& address) {
  return v1::SplitSpec::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

v1::ServerStats server_stats(const std::string& address) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ServerInfo info;
  const grpc::Status s = raw_stub(address)->GetInfo(&ctx, v1::GetInfoRequest{}, &info);
  if (!s.ok()) throw std::runtime_error("GetInfo: " + s.error_message());
  return info.stats();
}

void expect_targets_token_distributions(Client& client, const Model& target, const std::vector<int32_t>& prompt,
                                        Request request, int tokens, int draws, uint64_t seed0,
                                        const std::function<void(const Result&)>& each) {
  SamplingParams sp;
  sp.temperature = request.temperature;
  sp.top_k = request.top_k;
  sp.top_p = request.top_p;
  const std::vector<std::vector<double>> want = token_marginals(target, prompt, sp, tokens);
  const size_t vocab = want[0].size();
  std::vector<std::vector<int64_t>> got(static_cast<size_t>(tokens), std::vector<int64_t>(vocab, 0));
  for (int i = 0; i < draws; ++i) {
    request.seed = seed0 + static_cast<uint64_t>(i);
    const Result r = client.generate_ids(prompt, request);
    each(r);
    ASSERT_GE(r.ids.size(), static_cast<size_t>(tokens)) << "a generation emitted fewer than " << tokens << " tokens";
    for (int t = 0; t < tokens; ++t) got[t].at(r.ids[t]) += 1;
  }
  for (int t = 0; t < tokens; ++t) EXPECT_GT(goodness_of_fit_pvalue(got[t], want[t]), 1e-4) << "token " << t + 1;
}

void expect_targets_two_token_distribution(Client& client, const Model& target, const std::vector<int32_t>& prompt,
                                           Request request, int draws, uint64_t seed0,
                                           const std::function<void(const Result&)>& each) {
  expect_targets_token_distributions(client, target, prompt, request, 2, draws, seed0, each);
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids = tok.encode(text);
  ids.insert(ids.begin(), tok.bos_id());
  return ids;
}

}  // namespace splitspec::test

namespace splitspec::test {

ClientOptions with_verifier(ClientOptions o, const std::string& address, const std::string& target_dir) {
  if (address.empty()) {
    o.verifier = VerifierKind::kLocal;
    o.target_dir = target_dir;
  } else {
    o.verifier = VerifierKind::kServer;
    o.server = address;
  }
  return o;
}

void expect_connect_refused(const ClientOptions& o, const std::string& what) {
  try {
    Client::connect(o);
    ADD_FAILURE() << "connected; expected an error mentioning " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

namespace {

std::unique_ptr<Client> demo_target_alone() {
  ClientOptions o;
  o.verifier = VerifierKind::kLocal;
  o.drafter = "none";
  o.target_dir = demo_target_dir();
  return Client::connect(o);
}

}  // namespace

std::vector<std::vector<int32_t>> demo_target_ids(const Request& req, int prompts) {
  auto plain = demo_target_alone();
  std::vector<std::vector<int32_t>> out;
  for (int p = 0; p < prompts; ++p) out.push_back(plain->generate(test_prompts()[p], req).ids);
  return out;
}

Request fixed_length_request(int32_t tokens, float temperature, uint64_t seed) {
  Request req;
  req.max_new_tokens = tokens;
  req.ignore_eos = true;
  req.temperature = temperature;
  req.seed = seed;
  return req;
}

std::vector<int32_t> demo_target_ids_of(const std::vector<int32_t>& prompt, const Request& req) {
  return demo_target_alone()->generate_ids(prompt, req).ids;
}

}  // namespace splitspec::test

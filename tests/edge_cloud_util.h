#pragma once
// Real servers on loopback for the edge-cloud tests: in this process (so a
// test can read its counters) or as a separate splitspec-server process (so a
// test can kill it).
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "client/client.h"
#include "common/decoding/sampling.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "proto/splitspec.grpc.pb.h"
#include "server/server.h"
#include "tests/test_util.h"

namespace splitspec::test {

struct LocalServer {
  std::unique_ptr<Server> server;
  std::string address;  // 127.0.0.1:PORT
};

// Listens on a free loopback port; one compute thread.
LocalServer start_server(const std::string& target_dir, int max_sessions = 8, int max_draft_tokens = 16);
// The same with the rest of `c` as given (its listen, threads, grace and log
// level are the tests').
LocalServer start_server(ServerConfig c);

// The Session protocol's messages as a client sends them, for tests that
// speak it raw: an Open of `prompt` (16 new tokens), and round `round`'s
// draft chain.
v1::SessionRequest open_msg(std::vector<int32_t> prompt, int32_t vocab = 8000, float temperature = 0.0f);
v1::SessionRequest draft_msg(uint32_t round, std::vector<int32_t> tokens);
// Sends `msgs` on a fresh session and returns how it ended.
grpc::Status run_session(v1::SplitSpec::Stub& stub, const std::vector<v1::SessionRequest>& msgs);

// splitspec-server as a child process; returns its address once it serves.
std::string spawn_server(const std::string& target_dir, const TempDir& tmp, std::unique_ptr<Child>& child,
                         const std::vector<std::string>& extra_args = {});

// The same at `listen` (HOST:PORT): a server restarted where a killed one was.
std::string spawn_server_at(const std::string& listen, const std::string& target_dir, const TempDir& tmp,
                            std::unique_ptr<Child>& child);

// SIGKILL, and wait for it to be gone: a server lost mid-generation.
void kill_server(Child& child);
// spawn_server_at from a streaming callback: its error, or "" (a callback
// cannot assert).
std::string restart_server_at(const std::string& listen, const std::string& target_dir, const TempDir& tmp,
                              std::unique_ptr<Child>& child);

// The server verifier at `address` with `drafter` (the demo draft model when
// it needs one), one compute thread.
ClientOptions server_options(const std::string& address, const std::string& drafter);

std::unique_ptr<v1::SplitSpec::Stub> raw_stub(const std::string& address);
v1::ServerStats server_stats(const std::string& address);

// Runs `draws` generations seeded seed0, seed0+1, ... (`each` sees every
// result) and expects each of their first `tokens` tokens to follow the
// target's own marginal under the request's sampling settings (chi-square).
void expect_targets_token_distributions(Client& client, const Model& target, const std::vector<int32_t>& prompt,
                                        Request request, int tokens, int draws, uint64_t seed0,
                                        const std::function<void(const Result&)>& each);
// The same for the first two tokens.
void expect_targets_two_token_distribution(Client& client, const Model& target, const std::vector<int32_t>& prompt,
                                           Request request, int draws, uint64_t seed0,
                                           const std::function<void(const Result&)>& each);

// `text` as the client encodes a prompt: BOS, then its tokens.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text);

// `o` verifying on the server at `address`, or locally on `target_dir` when
// `address` is empty.
ClientOptions with_verifier(ClientOptions o, const std::string& address, const std::string& target_dir);

// Client::connect(o) throws splitspec::Error mentioning `what`.
void expect_connect_refused(const ClientOptions& o, const std::string& what);

// What the demo target alone generates for the first `prompts` test prompts.
std::vector<std::vector<int32_t>> demo_target_ids(const Request& req, int prompts);
// `tokens` tokens whatever comes (EOS ignored), at `temperature` with `seed`.
Request fixed_length_request(int32_t tokens, float temperature, uint64_t seed);

// What the demo target alone generates for one prompt of token ids.
std::vector<int32_t> demo_target_ids_of(const std::vector<int32_t>& prompt, const Request& req);

}  // namespace splitspec::test

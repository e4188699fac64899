// Faults and bad input on the edge-cloud path: clear errors, freed sessions,
// no hangs, and a server that keeps serving.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <functional>
#include <future>
#include <optional>
#include <thread>
#include <utility>

#include "client/client.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/error.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

using test::draft_msg;
using test::LocalServer;
using test::open_msg;
using test::run_session;
using test::TempDir;
using Stream = grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>;

TEST(EdgeCloudFaults, MalformedTrafficGetsInvalidArgumentAndTheServerKeepsServing) {
  LocalServer srv = test::start_server(test::demo_target_dir(), 8, 6);
  auto stub = test::raw_stub(srv.address);
  auto with_q = [](v1::SessionRequest d, std::vector<int32_t> ids, std::vector<float> probs) {
    v1::TokenDistribution* q = d.mutable_draft()->add_q();
    q->mutable_ids()->Add(ids.begin(), ids.end());
    q->mutable_probs()->Add(probs.begin(), probs.end());
    return d;
  };
  std::vector<int32_t> too_long(600, 5);
  too_long[0] = 1;
  struct Case {
    std::string name;
    std::vector<v1::SessionRequest> msgs;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"draft before open", {draft_msg(1, {5, 6})}, "Draft before Open"},
      {"round out of order", {open_msg({1, 5}), draft_msg(2, {5})}, "expected round 1"},
      {"too many draft tokens", {open_msg({1, 5}), draft_msg(1, {5, 5, 5, 5, 5, 5, 5})}, "exceeds the server's maximum of 6"},
      {"token outside the vocabulary", {open_msg({1, 5}), draft_msg(1, {5, 8000})}, "outside the vocabulary"},
      {"negative token", {open_msg({1, 5}), draft_msg(1, {-3})}, "outside the vocabulary"},
      {"prompt token outside the vocabulary", {open_msg({1, 9000})}, "prompt token id 9000 outside the vocabulary"},
      {"prompt longer than the context", {open_msg(too_long)}, "does not fit the model's context of 512"},
      {"empty prompt", {open_msg({})}, "prompt is empty"},
      {"empty request", {v1::SessionRequest{}}, "empty SessionRequest"},
      {"open twice", {open_msg({1, 5}), open_msg({1, 5})}, "Open sent twice"},
      {"q missing when sampling", {open_msg({1, 5}, 8000, 1.0f), draft_msg(1, {5})}, "sampling needs the q"},
      {"q does not sum to 1", {open_msg({1, 5}, 8000, 1.0f), with_q(draft_msg(1, {5}), {5, 6}, {0.2f, 0.3f})}, "sums to"},
      {"q negative", {open_msg({1, 5}, 8000, 1.0f), with_q(draft_msg(1, {5}), {5, 6}, {1.5f, -0.5f})}, "outside [0, 1]"},
      {"q NaN", {open_msg({1, 5}, 8000, 1.0f), with_q(draft_msg(1, {5}), {5}, {std::nanf("")})}, "outside [0, 1]"},
      {"q ids and probs differ in length", {open_msg({1, 5}, 8000, 1.0f), with_q(draft_msg(1, {5}), {5, 6}, {1.0f})}, "ids but"},
      {"q names a token twice", {open_msg({1, 5}, 8000, 1.0f), with_q(draft_msg(1, {5}), {5, 5}, {0.5f, 0.5f})}, "twice"},
      {"q does not support its token", {open_msg({1, 5}, 8000, 1.0f), with_q(draft_msg(1, {5}), {6}, {1.0f})}, "q"},
      {"bad sampling params", {[] { auto m = open_msg({1, 5}); m.mutable_open()->mutable_sampling()->set_temperature(-1); return m; }()}, "temperature"},
      {"max_new_tokens too large", {[] { auto m = open_msg({1, 5}); m.mutable_open()->set_max_new_tokens(1 << 30); return m; }()}, "max_new_tokens"},
      {"verdict_top_k over the server's limit", {[] { auto m = open_msg({1, 5}); m.mutable_open()->set_verdict_top_k(17); return m; }()}, "outside [0, 16] (the server's max_verdict_top_k)"},
      {"negative verdict_top_k", {[] { auto m = open_msg({1, 5}); m.mutable_open()->set_verdict_top_k(-1); return m; }()}, "verdict_top_k -1"},
  };
  for (const Case& c : cases) {
    const grpc::Status s = run_session(*stub, c.msgs);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.name << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(c.message), std::string::npos) << c.name << ": " << s.error_message();
  }
  // Parents that do not form a tree.
  {
    v1::SessionRequest d = draft_msg(1, {5, 6});
    d.mutable_draft()->add_parents(1);
    d.mutable_draft()->add_parents(0);
    const grpc::Status s = run_session(*stub, {open_msg({1, 5}), d});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }
  // Oversized message: refused by gRPC's own size limit, not by a crash.
  {
    // About 6 MB, over the 4 MiB limit.
    v1::SessionRequest big = open_msg(std::vector<int32_t>(3'000'000, 7000));
    const grpc::Status s = run_session(*stub, {big});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  }
  // A well-formed session still works, and every refused one was freed.
  ClientOptions o;
  o.mode = Mode::kEdgeSd;
  o.server = srv.address;
  o.draft_dir = test::demo_draft_dir();
  Request req;
  req.max_new_tokens = 12;
  EXPECT_EQ(Client::connect(o)->generate("The ship sailed", req).ids.size(), 12u);
  EXPECT_TRUE(test::wait_until([&] { return srv.server->active_sessions() == 0; }, std::chrono::seconds(10)));
  EXPECT_GE(test::server_stats(srv.address).invalid_requests(), static_cast<int64_t>(cases.size()));
}

// A server that answers every round with a correction, except that round 1
// gets whatever `round1` makes of its draft: verdicts to break the protocol with.
class ScriptedServer final : public v1::SplitSpec::Service {
 public:
  using Script = std::function<std::vector<v1::RoundVerdict>(const v1::Draft&)>;
  explicit ScriptedServer(Script round1) : round1_(std::move(round1)) {}

  grpc::Status GetInfo(grpc::ServerContext*, const v1::GetInfoRequest*, v1::ServerInfo* info) override {
    info->set_vocab_size(kVocab);
    info->set_max_context(64);
    info->set_max_draft_tokens(8);
    info->set_max_verdict_top_k(8);
    info->add_early_exit_layers(1);
    info->set_serving(true);
    return grpc::Status::OK;
  }

  grpc::Status Session(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::SessionResponse, v1::SessionRequest>* stream) override {
    v1::SessionRequest req;
    if (!stream->Read(&req) || !req.has_open()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no Open");
    const int32_t max_new = req.open().max_new_tokens();
    v1::SessionResponse opened;
    opened.mutable_opened()->set_max_draft_tokens(8);
    opened.mutable_opened()->set_context(64);
    stream->Write(opened);
    for (int32_t generated = 0; generated < max_new && stream->Read(&req);) {
      std::vector<v1::RoundVerdict> verdicts;
      if (req.draft().round() == 1) verdicts = round1_(req.draft());
      if (verdicts.empty() || !verdicts.back().final()) {
        verdicts.emplace_back();
        verdicts.back().add_tokens(3);
        verdicts.back().set_final(true);
      }
      for (v1::RoundVerdict& v : verdicts) {
        v.set_round(req.draft().round());
        if (v.final() && ++generated == max_new) v.set_finish_reason(v1::FINISH_REASON_LENGTH);
        v1::SessionResponse out;
        *out.mutable_verdict() = v;
        if (!stream->Write(out)) return grpc::Status::OK;
      }
    }
    return grpc::Status::OK;
  }

  // Cloud-only decoding: a token, then one outside the vocabulary.
  grpc::Status Generate(grpc::ServerContext*, const v1::GenerationRequest*,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    for (int32_t id : {3, 99}) {
      v1::GenerateResponse r;
      r.add_tokens(id);
      writer->Write(r);
    }
    return grpc::Status::OK;
  }

  static constexpr int32_t kVocab = 12;

 private:
  const Script round1_;
};

// Serves `service` on a free loopback port, whose address goes to `address`.
std::unique_ptr<grpc::Server> serve(ScriptedServer& service, std::string& address) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  address = "127.0.0.1:" + std::to_string(port);
  return server;
}

// Verdicts come from the server, so the client checks them: a malformed one
// ends the generation with an error that says what is wrong. Early verdicts
// most of all, which would otherwise reach a pre-draft worker, where an
// out-of-range id once terminated the whole process.
// The top K a lut client asks for come from the server too: ids outside the
// vocabulary or probabilities outside [0, 1] are refused before they reach
// the tables.
TEST(EdgeCloudFaults, MalformedTopKFromTheServerIsAClearError) {
  auto run = [](std::vector<int32_t> ids, std::vector<float> probs) {
    ScriptedServer service([ids, probs](const v1::Draft&) {
      v1::RoundVerdict v;
      v.add_tokens(3);
      v.set_final(true);
      v1::TokenDistribution* k = v.add_top_k();
      k->mutable_ids()->Add(ids.begin(), ids.end());
      k->mutable_probs()->Add(probs.begin(), probs.end());
      return std::vector<v1::RoundVerdict>{v};
    });
    ClientOptions o;
    std::unique_ptr<grpc::Server> server = serve(service, o.server);
    o.verifier = VerifierKind::kServer;
    o.drafter = "lut";
    o.drafter_options = {{"k", "4"}, {"order", "1"}};
    std::string error;
    try {
      Request req;
      req.max_new_tokens = 4;
      req.ignore_eos = true;
      Client::connect(o)->generate_ids({1, 4}, req);
    } catch (const Error& e) {
      error = e.what();
    }
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    return error;
  };
  EXPECT_EQ(run({3, 5}, {0.5f, 0.25f}), "");
  for (const auto& [ids, probs] : std::vector<std::pair<std::vector<int32_t>, std::vector<float>>>{
           {{99}, {0.5f}}, {{-2}, {0.5f}}, {{3}, {1.5f}}, {{3}, {std::nanf("")}}, {{3, 4}, {0.5f}}}) {
    EXPECT_NE(run(ids, probs).find("malformed top-K in the verdict for round 1"), std::string::npos)
        << ids.size() << " ids, " << probs.size() << " probs";
  }
}

TEST(EdgeCloudFaults, MalformedVerdictsOrTokensFromTheServerAreClearErrorsNotCrashes) {
  TempDir dir;
  Model::random(test::tiny_config(ScriptedServer::kVocab, 1), 32)->save(dir.str("draft"));
  const ScriptedServer::Script well_behaved = [](const v1::Draft&) { return std::vector<v1::RoundVerdict>{}; };
  auto run = [&](const ScriptedServer::Script& round1, std::vector<int32_t> prompt = {1, 4}, int32_t gamma = 2) {
    ScriptedServer service(round1);
    ClientOptions o;
    std::unique_ptr<grpc::Server> server = serve(service, o.server);
    o.mode = Mode::kEdgeFsd;
    o.draft_dir = dir.str("draft");
    o.predraft_adaptive = false;  // every round takes early verdicts
    auto client = Client::connect(o);
    Request req;
    req.max_new_tokens = 4;
    req.ignore_eos = true;
    req.gamma = gamma;
    std::string error;
    try {
      EXPECT_EQ(client->generate_ids(prompt, req).ids, std::vector<int32_t>(4, 3));
    } catch (const Error& e) {
      error = e.what();
    }
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    return error;
  };
  EXPECT_EQ(run(well_behaved), "") << "the scripted server itself is well-behaved";
  auto verdict = [](std::vector<int32_t> tokens, int32_t accepted, bool final) {
    v1::RoundVerdict v;
    v.mutable_tokens()->Add(tokens.begin(), tokens.end());
    v.set_accepted(accepted);
    v.set_final(final);
    v.set_exit_layer(final ? 2 : 1);
    v.set_confidence(0.5);
    return v;
  };
  auto just = [](v1::RoundVerdict v) { return [v](const v1::Draft&) { return std::vector<v1::RoundVerdict>{v}; }; };
  const std::pair<ScriptedServer::Script, std::string> cases[] = {
      {just(verdict({99}, 0, false)), "malformed early verdict for round 1: token 99 outside the vocabulary"},
      {just(verdict({-1}, 0, false)), "malformed early verdict for round 1: token -1 outside the vocabulary"},
      {just(verdict({}, 0, false)), "malformed early verdict for round 1: no tokens"},
      {just(verdict({3, 4}, 0, false)), "malformed early verdict for round 1: 2 tokens for 0 accepted"},
      {just(verdict({3}, -1, false)), "malformed early verdict for round 1: 1 tokens for -1 accepted"},
      {just(verdict({3, 4, 5, 6}, 3, false)), "malformed early verdict for round 1: accepts 3 of a 2-token draft"},
      {just([&] {
         v1::RoundVerdict v = verdict({3}, 1, false);  // only a final verdict may stop short
         v.set_finish_reason(v1::FINISH_REASON_EOS);
         return v;
       }()),
       "malformed early verdict for round 1: 1 tokens for 1 accepted"},
      {[&](const v1::Draft&) {
         return std::vector<v1::RoundVerdict>{verdict({3}, 0, false), verdict({4}, 0, false)};
       },
       "malformed early verdict for round 1: more than one per exit (the server runs 1)"},
      {just(verdict({99}, 0, true)), "malformed verdict for round 1: token 99 outside the vocabulary"},
      {just(verdict({3, 4}, 0, true)), "malformed verdict for round 1: 2 tokens for 0 accepted"},
      {just(verdict({3, 4, 5, 6}, 3, true)), "malformed verdict for round 1: accepts 3 of a 2-token draft"},
      {just([&] {
         v1::RoundVerdict v = verdict({3, 4, 5}, 1, true);
         v.set_finish_reason(v1::FINISH_REASON_EOS);
         return v;
       }()),
       "malformed verdict for round 1: 3 tokens for 1 accepted"},
      {[&](const v1::Draft& d) {
         const int32_t wrong = (d.tokens(0) + 1) % ScriptedServer::kVocab;
         return std::vector<v1::RoundVerdict>{verdict({wrong, 3}, 1, true)};
       },
       "verdict contradicts the draft"},
  };
  for (const auto& [script, want] : cases) {
    const std::string error = run(script);
    EXPECT_NE(error.find(want), std::string::npos) << "got: " << error << "\nwant: " << want;
  }
  // Early verdicts are checked against the round actually sent: two tokens
  // from the context's end, a gamma-4 round carries two.
  std::vector<int32_t> long_prompt(62, 5);
  long_prompt[0] = 1;
  EXPECT_NE(run(just(verdict({3, 4, 5, 6}, 3, false)), long_prompt, 4)
                .find("malformed early verdict for round 1: accepts 3 of a 2-token draft"),
            std::string::npos);
  // A tree's verdict must follow a branch of the tree.
  {
    v1::RoundVerdict off_branch = verdict({3, 4}, 1, true);
    off_branch.add_path(5);
    EXPECT_NE(run(just(off_branch)).find("malformed verdict for round 1: a path that is not a branch of the tree"),
              std::string::npos);
  }

  // Cloud-only decoding checks the target's tokens the same way.
  ScriptedServer service(well_behaved);
  ClientOptions o;
  std::unique_ptr<grpc::Server> server = serve(service, o.server);
  o.mode = Mode::kCloudAr;
  std::vector<int32_t> got;
  try {
    Client::connect(o)->generate_ids({1, 4}, Request{}, [&](int32_t id) { got.push_back(id); });
    ADD_FAILURE() << "a token outside the vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("generated token 99 outside the vocabulary [0, 12)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(got, std::vector<int32_t>{3}) << "only valid tokens reach the caller";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

TEST(EdgeCloudFaults, TokenizerOrVocabularyMismatchIsRefused) {
  TempDir dir;
  // A target with the demo's vocabulary size but its own, different tokenizer.
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  test::write_file(dir.path() / "corpus.txt", text);
  Model::random(test::tiny_config(8000, 1), 3)->save(dir.str("target"));
  TokenizerTrainOptions t;
  t.corpus = dir.str("corpus.txt");
  t.out_dir = dir.str("target");
  t.vocab_size = 300;
  train_tokenizer(t);
  LocalServer srv = test::start_server(dir.str("target"));

  ClientOptions o;
  o.mode = Mode::kEdgeSd;
  o.server = srv.address;
  o.draft_dir = test::demo_draft_dir();
  try {
    Client::connect(o);
    FAIL() << "connect accepted a mismatched tokenizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer mismatch"), std::string::npos) << e.what();
  }
  o.mode = Mode::kCloudAr;
  EXPECT_THROW(Client::connect(o), Error);

  // The server checks too, for clients that skip GetInfo.
  auto stub = test::raw_stub(srv.address);
  v1::SessionRequest open = open_msg({1, 5});
  open.mutable_open()->set_tokenizer_fingerprint(Tokenizer(test::demo_draft_dir()).fingerprint());
  grpc::Status s = run_session(*stub, {open});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("tokenizer mismatch"), std::string::npos) << s.error_message();
  s = run_session(*stub, {open_msg({1, 5}, 32000)});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("vocabulary mismatch"), std::string::npos) << s.error_message();

  // A draft with another vocabulary size is refused at connect.
  Model::random(test::tiny_config(64, 1), 4)->save(dir.str("small_draft"));
  o.mode = Mode::kEdgeSd;
  o.draft_dir = dir.str("small_draft");
  try {
    Client::connect(o);
    FAIL() << "connect accepted a mismatched vocabulary";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size 64"), std::string::npos) << e.what();
  }
}

TEST(EdgeCloudFaults, SessionsBeyondTheLimitGetResourceExhausted) {
  LocalServer srv = test::start_server(test::demo_target_dir(), 2);
  auto stub = test::raw_stub(srv.address);
  grpc::ClientContext c1, c2;
  auto s1 = stub->Session(&c1);
  auto s2 = stub->Session(&c2);
  ASSERT_TRUE(s1->Write(open_msg({1, 5})));
  ASSERT_TRUE(s2->Write(open_msg({1, 5})));
  v1::SessionResponse r;
  ASSERT_TRUE(s1->Read(&r));
  ASSERT_TRUE(s2->Read(&r));
  EXPECT_EQ(srv.server->active_sessions(), 2);
  const grpc::Status third = run_session(*stub, {open_msg({1, 5})});
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << third.error_message();
  EXPECT_EQ(test::server_stats(srv.address).sessions_rejected(), 1);
  c1.TryCancel();
  s1->Finish();
  EXPECT_TRUE(test::wait_until([&] { return srv.server->active_sessions() == 1; }, std::chrono::seconds(10)));
  EXPECT_TRUE(run_session(*stub, {open_msg({1, 5})}).ok());
  c2.TryCancel();
  s2->Finish();
}

// The client process is SIGKILLed mid-generation: its socket closes and the
// server frees the session.
TEST(EdgeCloudFaults, ClientThatVanishesHasItsSessionFreed) {
  LocalServer srv = test::start_server(test::demo_target_dir());
  TempDir tmp;
  test::Child client({std::string(SPLITSPEC_BIN_DIR) + "/splitspec", "generate", "--mode", "edge-sd", "--server",
                      srv.address, "--draft", test::demo_draft_dir(), "--prompt", "The ship sailed", "--ignore-eos",
                      "--max-new-tokens", "400", "--gamma", "1", "--threads", "1"},
                     tmp.str("out"), tmp.str("err"));
  ASSERT_TRUE(test::wait_until([&] { return test::server_stats(srv.address).rounds_total() >= 3; }, std::chrono::seconds(60)))
      << test::read_file(tmp.path() / "err");
  EXPECT_EQ(srv.server->active_sessions(), 1);
  client.signal(SIGKILL);
  EXPECT_EQ(client.wait(std::chrono::seconds(10)), -1);
  EXPECT_TRUE(test::wait_until([&] { return srv.server->active_sessions() == 0; }, std::chrono::seconds(10)));
  // A cancelled stream is freed too.
  auto stub = test::raw_stub(srv.address);
  grpc::ClientContext ctx;
  auto s = stub->Session(&ctx);
  ASSERT_TRUE(s->Write(open_msg({1, 5})));
  v1::SessionResponse r;
  ASSERT_TRUE(s->Read(&r));
  EXPECT_EQ(srv.server->active_sessions(), 1);
  ctx.TryCancel();
  s->Finish();
  EXPECT_TRUE(test::wait_until([&] { return srv.server->active_sessions() == 0; }, std::chrono::seconds(10)));
}

// The server process dies (SIGKILL) or freezes (SIGSTOP) mid-generation: the
// client's call returns a clear error, never hangs.
TEST(EdgeCloudFaults, ServerKilledOrFrozenMidGenerationGivesAClearErrorWithinTheDeadline) {
  for (Mode mode : {Mode::kEdgeSd, Mode::kCloudAr}) {
    for (int sig : {SIGKILL, SIGSTOP}) {
      TempDir tmp;
      std::unique_ptr<test::Child> server;
      const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server);
      ClientOptions o;
      o.mode = mode;
      o.server = address;
      o.draft_dir = test::demo_draft_dir();
      auto client = Client::connect(o);
      Request req;
      req.max_new_tokens = 400;
      req.ignore_eos = true;
      req.deadline = std::chrono::seconds(3);
      std::atomic<int> seen{0};
      auto call = std::async(std::launch::async, [&] {
        try {
          client->generate_ids({1, 345, 1046}, req, [&](int32_t) {
            seen += 1;
            std::this_thread::sleep_for(std::chrono::milliseconds(2));  // keep it mid-generation
          });
          return std::string("finished");
        } catch (const Error& e) {
          return std::string(e.what());
        }
      });
      ASSERT_TRUE(test::wait_until([&] { return seen.load() >= 5; }, std::chrono::seconds(30)));
      server->signal(sig);
      ASSERT_EQ(call.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "client hung";
      const std::string what = call.get();
      const std::string expect = sig == SIGKILL ? "UNAVAILABLE" : "DEADLINE_EXCEEDED";
      EXPECT_NE(what.find("server " + address), std::string::npos) << what;
      EXPECT_NE(what.find(expect), std::string::npos) << mode_name(mode) << ": " << what;
    }
  }
}

TEST(EdgeCloudFaults, DeadServerAtConnectIsAClearError) {
  ClientOptions o;
  o.mode = Mode::kEdgeSd;
  o.server = "127.0.0.1:1";  // nothing listens on port 1
  o.draft_dir = test::demo_draft_dir();
  o.connect_timeout = std::chrono::milliseconds(500);
  try {
    Client::connect(o);
    FAIL() << "connected to nothing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach server 127.0.0.1:1"), std::string::npos) << e.what();
  }
}

// SIGTERM: health turns NOT_SERVING, the generation in flight completes, the
// process exits 0.
TEST(EdgeCloudFaults, SigtermDrainsInFlightGenerationsThenExits) {
  TempDir tmp;
  std::unique_ptr<test::Child> server;
  const std::string address = test::spawn_server(test::demo_target_dir(), tmp, server, {"--shutdown-grace-s", "30"});
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  auto check = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckResponse r;
    const grpc::Status s = health->Check(&ctx, grpc::health::v1::HealthCheckRequest{}, &r);
    return s.ok() ? r.status() : grpc::health::v1::HealthCheckResponse::UNKNOWN;
  };
  EXPECT_EQ(check(), grpc::health::v1::HealthCheckResponse::SERVING);

  ClientOptions o;
  o.mode = Mode::kEdgeSd;
  o.server = address;
  o.draft_dir = test::demo_draft_dir();
  auto client = Client::connect(o);
  Request req;
  req.max_new_tokens = 120;
  req.ignore_eos = true;
  req.gamma = 1;
  std::atomic<int> seen{0};
  auto call = std::async(std::launch::async, [&] {
    return client->generate_ids({1, 345, 1046}, req, [&](int32_t) {
      seen += 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
  });
  ASSERT_TRUE(test::wait_until([&] { return seen.load() >= 5; }, std::chrono::seconds(30)));
  server->signal(SIGTERM);
  EXPECT_TRUE(test::wait_until([&] { return check() == grpc::health::v1::HealthCheckResponse::NOT_SERVING; },
                               std::chrono::seconds(10)));
  // New work is refused while the old drains.
  try {
    Client::connect(o);
    ADD_FAILURE() << "a draining server accepted a new client";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shutting down"), std::string::npos) << e.what();
  }
  const Result r = call.get();  // finishes despite the shutdown
  EXPECT_EQ(r.ids.size(), 120u);
  EXPECT_EQ(server->wait(std::chrono::seconds(30)), 0);
  const std::string log = test::read_file(tmp.path() / "server.err");
  EXPECT_NE(log.find("event=shutting_down active_sessions=1"), std::string::npos) << log;
  EXPECT_NE(log.find("event=stopped"), std::string::npos) << log;
}

// A program that embeds the server and calls exit() while it serves, a
// session open: the server stops itself at exit, before static destructors
// (spdlog's registry) run under its reactors.
TEST(EdgeCloudFaults, ExitWhileServingASessionEndsTheProcessCleanly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        LocalServer srv = test::start_server(test::demo_target_dir(), 8, 6);
        auto stub = test::raw_stub(srv.address);
        grpc::ClientContext ctx;
        std::unique_ptr<Stream> s = stub->Session(&ctx);
        s->Write(open_msg({1, 5}));
        v1::SessionResponse r;
        s->Read(&r);  // the session is open and served
        if (srv.server->active_sessions() != 1) std::exit(3);
        // The session ends, and its reactor logs, while exit() runs. Without
        // the server's own stop at exit, the sanitized build hangs here (LSan's
        // exit-time check waits on a lock forever): a hang ends in SIGALRM.
        ctx.TryCancel();
        ::alarm(60);
        std::exit(0);  // no shutdown(), no destructors
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace splitspec

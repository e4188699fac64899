// What a hostile or unlucky client can make a real server process do, tried
// over loopback: each ends in a clear status at once, and the server keeps
// serving.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstdlib>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "client/client.h"
#include "common/backend/cpu_backend.h"
#include "common/backend/registry.h"
#include "common/model/kv_cache.h"
#include "common/model/model.h"
#include "common/util/error.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/splitspec.grpc.pb.h"
#include "server/log_text.h"
#include "server/server.h"
#include "tests/edge_cloud_util.h"
#include "tests/test_util.h"

namespace splitspec::test {
namespace {

using SessionStream = grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>;

// An Open of a one-token prompt for a target of `vocab` tokens.
v1::SessionRequest open_request(int32_t vocab) {
  v1::SessionRequest open;
  open.mutable_open()->mutable_prompt_ids()->Add(1);
  open.mutable_open()->set_max_new_tokens(4);
  open.mutable_open()->set_vocab_size(vocab);
  return open;
}

// Reads `stream` to its end; its status.
grpc::Status drain(SessionStream& stream) {
  v1::SessionResponse r;
  while (stream.Read(&r)) {
  }
  return stream.Finish();
}

// An in-process server of the demo target on a free loopback port.
ServerConfig demo_config() {
  ServerConfig c;
  c.target_dir = demo_target_dir();
  c.listen = "127.0.0.1:0";
  c.compute_threads = 1;
  c.log_level = "warn";
  return c;
}

// GetInfo's counters from a server that wants the test's token.
v1::ServerStats server_stats_with_token(const std::string& address) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer robot-1");
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ServerInfo info;
  const grpc::Status s = raw_stub(address)->GetInfo(&ctx, v1::GetInfoRequest{}, &info);
  if (!s.ok()) throw std::runtime_error("GetInfo: " + s.error_message());
  return info.stats();
}

// gRPC reflection's ListServices, by hand (its proto is not installed): the
// call's status, and the answer's raw bytes in `raw`.
grpc::Status list_services(const std::string& address, const std::string& token, std::string* raw = nullptr) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  auto step = [&](int n) {
    cq.Next(&tag, &ok);
    EXPECT_EQ(tag, reinterpret_cast<void*>(static_cast<intptr_t>(n)));
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(1);
  const char request[] = {0x3a, 0x00};  // field 7, list_services: ""
  grpc::Slice slice(request, sizeof(request));
  call->Write(grpc::ByteBuffer(&slice, 1), reinterpret_cast<void*>(2));
  step(2);
  call->WritesDone(reinterpret_cast<void*>(3));
  step(3);
  grpc::ByteBuffer answer;
  call->Read(&answer, reinterpret_cast<void*>(4));
  if (step(4) && raw) {
    std::vector<grpc::Slice> slices;
    (void)answer.Dump(&slices);
    for (const auto& s : slices) raw->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// A process's memory, from /proc: "VmSize:" (virtual) or "VmRSS:" (resident).
int64_t status_bytes(int pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == field) {
      int64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}
int64_t virtual_bytes(int pid) { return status_bytes(pid, "VmSize:"); }
int64_t resident_bytes(int pid) { return status_bytes(pid, "VmRSS:"); }

// A session whose KV cache the server cannot allocate (at Open the cache
// takes the prompt and some room) gets RESOURCE_EXHAUSTED at once; it used
// to wait for its deadline while the server's reactor held the stream.
TEST(ServerLimits, AnOpenThatRunsOutOfMemoryGetsAStatusAtOnce) {
  TempDir tmp;
  ModelConfig c = tiny_config(64, 8);
  c.max_position_embeddings = int64_t{1} << 21;  // 8 layers x K, V x 2 heads x 8 x 4 B: 1 KiB a position
  Model::random(c, 1)->save(tmp.str("model"));
  std::unique_ptr<Child> server;
  // The server runs the whole declared context (past the 4096 a load keeps).
  ::setenv("SPLITSPEC_MAX_CONTEXT", std::to_string(c.max_position_embeddings).c_str(), 1);
  const std::string address = spawn_server(tmp.str("model"), tmp, server, {"--max-new-tokens", "8"});
  ::unsetenv("SPLITSPEC_MAX_CONTEXT");
  // Room for the server's own work and the prompt, not for its cache (1 GiB).
  const rlimit limit{static_cast<rlim_t>(virtual_bytes(server->pid()) + (int64_t{384} << 20)), RLIM_INFINITY};
  ASSERT_EQ(prlimit(server->pid(), RLIMIT_AS, &limit, nullptr), 0);
  v1::SessionRequest open = open_request(64);
  open.mutable_open()->mutable_prompt_ids()->Resize(1 << 20, 1);

  auto stub = raw_stub(address);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const auto start = std::chrono::steady_clock::now();
  auto stream = stub->Session(&ctx);
  ASSERT_TRUE(stream->Write(open));
  const grpc::Status s = drain(*stream);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message() << "\n"
                                                                  << read_file(tmp.path() / "server.err");
  EXPECT_NE(s.error_message().find("no memory"), std::string::npos) << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

  // Generate takes the same road; and the server still answers.
  grpc::ClientContext gctx;
  gctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto reader = stub->Generate(&gctx, open.open());
  v1::GenerateResponse g;
  while (reader->Read(&g)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NO_THROW(server_stats(address));
}


// kv_budget_bytes is admission control: each session reserves at Open what
// its prompt, max_new_tokens and one largest draft can fill; one that would
// not fit beside the open ones is refused at once, and fits once they end.
TEST(ServerLimits, ASessionOverTheKvBudgetIsRefusedAtOpen) {
  const ModelConfig c = Model::load(demo_target_dir())->config();
  const int64_t per_position = static_cast<int64_t>(KVCache::bytes_per_position(c, KVType::F32));
  const int32_t max_new = 100;
  const int64_t one = (1 + max_new + 16) * per_position;  // one-token prompt, max_draft_tokens 16
  TempDir tmp;
  std::unique_ptr<Child> server;
  const std::string address = spawn_server(demo_target_dir(), tmp, server,
                                           {"--kv-budget-bytes", std::to_string(one * 3 / 2), "--max-draft-tokens", "16"});
  auto stub = raw_stub(address);
  v1::SessionRequest open = open_request(static_cast<int32_t>(c.vocab_size));
  open.mutable_open()->set_max_new_tokens(max_new);
  grpc::ClientContext first_ctx;
  first_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto first = stub->Session(&first_ctx);
  ASSERT_TRUE(first->Write(open));
  v1::SessionResponse r;
  ASSERT_TRUE(first->Read(&r));
  ASSERT_TRUE(r.has_opened());

  auto second_status = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto second = stub->Session(&ctx);
    second->Write(open);
    second->WritesDone();
    return drain(*second);
  };
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status refused = second_status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("kv_budget_bytes"), std::string::npos) << refused.error_message();
  // A smaller request fits beside the first.
  open.mutable_open()->set_max_new_tokens(8);
  EXPECT_TRUE(second_status().ok());
  EXPECT_EQ(server_stats(address).invalid_requests(), 0) << "a refusal for room is not an invalid request";

  // Once the first ends, its reservation is free again.
  first->WritesDone();
  EXPECT_TRUE(drain(*first).ok());
  open.mutable_open()->set_max_new_tokens(max_new);
  EXPECT_TRUE(wait_until([&] { return second_status().ok(); }, std::chrono::seconds(10)));
}

// A client that opens a long Generate and never reads it: once the replies
// waiting for it pass max_send_queue_bytes the server cancels the stream
// (it used to queue every token of the generation), counts it, and keeps
// its resident memory where it was.
TEST(ServerLimits, AClientThatStopsReadingIsClosedWithBoundedMemory) {
  TempDir tmp;
  ModelConfig c = tiny_config(64, 2);
  c.max_position_embeddings = 1 << 16;
  Model::random(c, 1)->save(tmp.str("model"));
  std::unique_ptr<Child> server;
  ::setenv("SPLITSPEC_MAX_CONTEXT", std::to_string(c.max_position_embeddings).c_str(), 1);
  const std::string address =
      spawn_server(tmp.str("model"), tmp, server, {"--max-new-tokens", "60000", "--max-send-queue-bytes", "16384"});
  ::unsetenv("SPLITSPEC_MAX_CONTEXT");
  const int64_t before = resident_bytes(server->pid());
  // A small, fixed receive window (no BDP probing, which would grow it to
  // megabytes), so the server's writes stall soon, as over a slow link.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16384);
  auto stub = v1::SplitSpec::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::GenerationRequest req = open_request(64).open();
  req.set_max_new_tokens(60000);
  req.set_ignore_eos(true);
  auto reader = stub->Generate(&ctx, req);  // and never read
  ASSERT_TRUE(wait_until([&] { return read_file(tmp.path() / "server.err").find("event=slow_reader") != std::string::npos; },
                         std::chrono::seconds(90)))
      << read_file(tmp.path() / "server.err");
  EXPECT_LT(resident_bytes(server->pid()) - before, int64_t{32} << 20);
  v1::GenerateResponse r;
  int64_t received = 0;
  while (reader->Read(&r)) received += r.tokens_size();
  const grpc::Status s = reader->Finish();
  EXPECT_TRUE(s.error_code() == grpc::StatusCode::CANCELLED || s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();
  EXPECT_LT(received, 60000);
  EXPECT_NO_THROW(server_stats(address));
}

// A client's Cancel ends its session as CANCELLED, and is not counted or
// logged as an invalid request.
TEST(ServerLimits, ACancelIsNotAnInvalidRequest) {
  LocalServer srv = start_server(demo_target_dir());
  auto stub = raw_stub(srv.address);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->Session(&ctx);
  v1::SessionRequest open = open_request(8000);  // the demo target's
  ASSERT_TRUE(stream->Write(open));
  v1::SessionResponse r;
  ASSERT_TRUE(stream->Read(&r));  // Opened
  v1::SessionRequest cancel;
  cancel.mutable_cancel();
  ASSERT_TRUE(stream->Write(cancel));
  EXPECT_EQ(drain(*stream).error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(server_stats(srv.address).invalid_requests(), 0);
}


// Silent streams squatting on every slot (a token holder that opens Session
// streams and sends nothing) are ended at session_idle_timeout_s, so another
// robot gets a slot within that and a little more.
TEST(ServerLimits, SilentSessionsDoNotLockOutAThirdClient) {
  TempDir tmp;
  write_file(tmp.path() / "tokens", "robot-1\n");
  std::unique_ptr<Child> server;
  const std::string address =
      spawn_server(demo_target_dir(), tmp, server,
                   {"--max-sessions", "2", "--session-idle-timeout-s", "1", "--auth-tokens-file", tmp.str("tokens"),
                    "--allow-insecure-tokens"});
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::SplitSpec::NewStub(channel);
  grpc::ClientContext silent[2];
  std::unique_ptr<SessionStream> streams[2];
  for (int i = 0; i < 2; ++i) {
    silent[i].AddMetadata("authorization", "Bearer robot-1");
    silent[i].set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    streams[i] = stub->Session(&silent[i]);
  }
  ASSERT_TRUE(wait_until([&] { return server_stats_with_token(address).active_sessions() == 2; }, std::chrono::seconds(10)));
  const auto start = std::chrono::steady_clock::now();
  ClientOptions o = server_options(address, "pld");
  o.auth_token = "robot-1";
  o.allow_insecure_tokens = true;
  o.target_dir = "";
  Request req;
  req.max_new_tokens = 4;
  std::string last_error;
  bool served = false;
  while (!served && std::chrono::steady_clock::now() - start < std::chrono::seconds(3)) {
    try {
      served = Client::connect(o)->generate_ids({1, 5, 9}, req).ids.size() == 4;
    } catch (const Error& e) {
      last_error = e.what();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  EXPECT_TRUE(served) << last_error;
  for (auto& s : streams) {
    const grpc::Status status = drain(*s);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_NE(status.error_message().find("session_idle_timeout_s"), std::string::npos) << status.error_message();
  }
}

// A session open longer than max_session_lifetime_s is ended, busy or not.
TEST(ServerLimits, ASessionIsEndedAtItsLifetime) {
  ServerConfig c = demo_config();
  c.session_idle_timeout_s = 0;
  c.max_session_lifetime_s = 1;
  Server server(c);
  server.start();
  auto stub = raw_stub("127.0.0.1:" + std::to_string(server.port()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const auto start = std::chrono::steady_clock::now();
  auto stream = stub->Session(&ctx);
  const grpc::Status s = drain(*stream);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(s.error_message().find("max_session_lifetime_s"), std::string::npos) << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(server.metrics_text().find("splitspec_sessions_expired_total 1"), std::string::npos);
  server.shutdown();
}


// gRPC's reflection registers itself on every server once its library is
// loaded, and answers before any handler could check a token. Under bearer
// tokens the transport checks them first (auth_gate.h), so on the main port
// reflection answers only a call with a token; the plaintext health port
// never has it. Without tokens the main port answers it.
TEST(ServerLimits, ReflectionAnswersOnlyATokenOnTheMainPortAndNeverOnTheHealthPort) {
  TempDir tmp;
  write_file(tmp.path() / "tokens", "robot-1\n");
  ServerConfig c = demo_config();
  c.health_listen = "127.0.0.1:0";
  c.auth_tokens_file = tmp.str("tokens");
  c.allow_insecure_tokens = true;
  Server server(c);
  server.start();
  const std::string main_port = "127.0.0.1:" + std::to_string(server.port());
  const std::string health_port = "127.0.0.1:" + std::to_string(server.health_port());
  for (const std::string token : {"", "robot-2", "robot-1"}) {
    std::string raw;
    const grpc::Status s = list_services(main_port, token, &raw);
    if (token == "robot-1") {
      EXPECT_TRUE(s.ok()) << s.error_message();
      EXPECT_NE(raw.find("splitspec.v1.SplitSpec"), std::string::npos);
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "token '" << token << "'";
      EXPECT_EQ(raw.find("splitspec.v1.SplitSpec"), std::string::npos);
    }
  }
  for (const std::string token : {"", "robot-1"}) {
    std::string raw;
    const grpc::Status s = list_services(health_port, token, &raw);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << "token '" << token << "'";
    EXPECT_EQ(raw.find("splitspec.v1.SplitSpec"), std::string::npos);
  }
  {
    auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(health_port, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckResponse r;
    EXPECT_TRUE(health->Check(&ctx, grpc::health::v1::HealthCheckRequest{}, &r).ok());
    EXPECT_EQ(r.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  server.shutdown();

  LocalServer open = start_server(demo_target_dir());
  std::string raw;
  const grpc::Status s = list_services(open.address, "", &raw);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(raw.find("splitspec.v1.SplitSpec"), std::string::npos);
}

// This process's threads, from /proc.
int thread_count() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "Threads:") {
      int n = 0;
      in >> n;
      return n;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}

// How many more threads this process has once `streams` reflection streams
// with a token are open and silent on a server with `max_rpc_threads`; each
// holds a handler thread until it ends. A GetInfo must still be answered.
int threads_held_by_silent_reflection_streams(int32_t max_rpc_threads, int streams) {
  TempDir tmp;
  write_file(tmp.path() / "tokens", "robot-1\n");
  ServerConfig c = demo_config();
  c.auth_tokens_file = tmp.str("tokens");
  c.allow_insecure_tokens = true;
  c.max_rpc_threads = max_rpc_threads;
  Server server(c);
  server.start();
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  server_stats_with_token(address);  // the channel's and the server's own threads first
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int before = thread_count();
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::GenericClientAsyncReaderWriter>> calls;
  for (int i = 0; i < streams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->AddMetadata("authorization", "Bearer robot-1");
    calls.push_back(stub.PrepareCall(contexts.back().get(), "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq));
    calls.back()->StartCall(reinterpret_cast<void*>(static_cast<intptr_t>(i + 1)));
  }
  void* tag;
  bool ok;
  for (int i = 0; i < streams; ++i) cq.Next(&tag, &ok);
  // Handlers start as the calls arrive; give the server time to take them all.
  const int most = before + streams + 8;
  int held = 0;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    held = std::max(held, thread_count() - before);
    if (thread_count() >= most) break;
  }
  EXPECT_NO_THROW(server_stats_with_token(address)) << "the splitspec service does not wait on reflection's threads";
  for (auto& ctx : contexts) ctx->TryCancel();
  // Each Finish writes its status when the call completes: they outlive the waits below.
  std::vector<grpc::Status> statuses(static_cast<size_t>(streams));
  for (int i = 0; i < streams; ++i)
    calls[static_cast<size_t>(i)]->Finish(&statuses[static_cast<size_t>(i)],
                                          reinterpret_cast<void*>(static_cast<intptr_t>(1000 + i)));
  for (int i = 0; i < streams; ++i) cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  server.shutdown();
  return held;
}

// Each silent reflection stream held a thread of the server's, without
// bound; max_rpc_threads bounds them.
TEST(ServerLimits, SilentReflectionStreamsHoldNoMoreThanTheThreadQuota) {
  const int streams = 24;
  const int unbounded = threads_held_by_silent_reflection_streams(64, streams);
  const int bounded = threads_held_by_silent_reflection_streams(4, streams);
  EXPECT_GE(unbounded, streams - 2) << "a quota above the streams lets each hold a thread";
  EXPECT_LE(bounded, 4 + 2) << "four handler threads, and gRPC's own";
}

// The transport checks the token before any handler runs: an
// unauthenticated call with a body that is not even a protobuf message gets
// UNAUTHENTICATED (a handler would first have parsed it and failed
// otherwise), and is counted as unauthenticated, not as invalid.
TEST(ServerLimits, AnUnauthenticatedCallIsRefusedBeforeItsBodyIsRead) {
  TempDir tmp;
  write_file(tmp.path() / "tokens", "robot-1\n");
  std::unique_ptr<Child> server;
  const std::string address = spawn_server(demo_target_dir(), tmp, server,
                                           {"--auth-tokens-file", tmp.str("tokens"), "--allow-insecure-tokens"});
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  for (const char* method : {"/splitspec.v1.SplitSpec/GetInfo", "/splitspec.v1.SplitSpec/Generate"}) {
    for (const std::string token : {"", "robot-2"}) {
      grpc::ClientContext ctx;
      if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      const std::string garbage(1 << 20, '\xff');
      grpc::Slice slice(garbage.data(), garbage.size());
      grpc::CompletionQueue cq;
      auto call = stub.PrepareUnaryCall(&ctx, method, grpc::ByteBuffer(&slice, 1), &cq);
      call->StartCall();
      grpc::ByteBuffer answer;
      grpc::Status status;
      call->Finish(&answer, &status, reinterpret_cast<void*>(1));
      void* tag;
      bool ok;
      ASSERT_TRUE(cq.Next(&tag, &ok));
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method << ": " << status.error_message();
      cq.Shutdown();
      while (cq.Next(&tag, &ok)) {
      }
    }
  }
  const v1::ServerStats stats = server_stats_with_token(address);
  EXPECT_EQ(stats.invalid_requests(), 0);
  EXPECT_EQ(stats.sessions_total(), 0);
}

// max_sessions_per_token: one token's streams cannot take every slot; the
// next of that token is refused at once, another token's is served, and
// the slot is the token's again once its stream ends.
TEST(ServerLimits, OneTokenCannotHoldMoreThanItsShareOfSessions) {
  TempDir tmp;
  write_file(tmp.path() / "tokens", "robot-1\nrobot-2\n");
  std::unique_ptr<Child> server;
  const std::string address =
      spawn_server(demo_target_dir(), tmp, server,
                   {"--auth-tokens-file", tmp.str("tokens"), "--allow-insecure-tokens", "--max-sessions-per-token", "1"});
  auto stub = raw_stub(address);
  auto open_as = [&](grpc::ClientContext& ctx, const std::string& token) {
    ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto stream = stub->Session(&ctx);
    stream->Write(open_request(8000));
    return stream;
  };
  grpc::ClientContext held_ctx;
  auto held = open_as(held_ctx, "robot-1");
  v1::SessionResponse r;
  ASSERT_TRUE(held->Read(&r));
  ASSERT_TRUE(r.has_opened());
  {
    grpc::ClientContext ctx;
    auto second = open_as(ctx, "robot-1");
    const grpc::Status s = drain(*second);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find("max_sessions_per_token"), std::string::npos) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    auto other = open_as(ctx, "robot-2");
    ASSERT_TRUE(other->Read(&r)) << drain(*other).error_message() << read_file(tmp.path() / "server.err");
    EXPECT_TRUE(r.has_opened());
    other->WritesDone();
    EXPECT_TRUE(drain(*other).ok());
  }
  held->WritesDone();
  EXPECT_TRUE(drain(*held).ok());
  EXPECT_TRUE(wait_until(
      [&] {
        grpc::ClientContext ctx;
        auto again = open_as(ctx, "robot-1");
        const bool opened = again->Read(&r) && r.has_opened();
        again->WritesDone();
        return drain(*again).ok() && opened;
      },
      std::chrono::seconds(10)));
}

// A connection with no stream does not hold its socket past
// max_connection_idle_s (one of the HTTP/2 limits against gRPC 1.51's
// connection-exhaustion advisory).
TEST(ServerLimits, AnIdleConnectionIsClosed) {
  ServerConfig c = demo_config();
  c.max_connection_idle_s = 1;
  Server server(c);
  server.start();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials());
  ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  EXPECT_TRUE(wait_until([&] { return channel->GetState(false) != GRPC_CHANNEL_READY; }, std::chrono::seconds(8)));
  server.shutdown();
}

// Text a client sends, echoed in a log line, stays on that line: a
// tokenizer fingerprint carrying a newline cannot forge a log entry.
TEST(ServerLimits, ClientTextCannotForgeALogLine) {
  EXPECT_EQ(log_text("a\"b\\c\nd\te\x01"), "a\\\"b\\\\c\\nd\\te\\x01");
  TempDir tmp;
  std::unique_ptr<Child> server;
  const std::string address = spawn_server(demo_target_dir(), tmp, server);
  auto stub = raw_stub(address);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->Session(&ctx);
  v1::SessionRequest open = open_request(8000);
  open.mutable_open()->set_tokenizer_fingerprint("abc\nevent=forged \"x\"");
  ASSERT_TRUE(stream->Write(open));
  EXPECT_EQ(drain(*stream).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  server->signal(SIGTERM);
  server->wait(std::chrono::seconds(30));
  const std::string log = read_file(tmp.path() / "server.err");
  EXPECT_NE(log.find("abc\\nevent=forged \\\"x\\\""), std::string::npos) << log;
  EXPECT_EQ(log.find("\nevent=forged"), std::string::npos) << log;
}


// A backend whose device can be lost, registered in this test process as
// "cuda" (the test binary links no GPU backend): the CPU's, until told.
std::atomic<bool> g_lose_device{false};
class LosableBackend final : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  std::string fatal_error() const override { return g_lose_device ? "cudaErrorIllegalAddress: an illegal memory access" : ""; }
};

// A GPU's sticky error: health turns NOT_SERVING within a second, new
// streams are refused UNAVAILABLE with the reason (clients fail over), and
// the metrics say so.
TEST(ServerLimits, ALostDeviceTurnsHealthNotServingAndRefusesStreams) {
  register_backend("cuda", [](const std::string& path, const BackendOptions&) -> std::shared_ptr<Backend> {
    return std::make_shared<LosableBackend>(Model::load(path));
  });
  ServerConfig c = demo_config();
  c.health_listen = "127.0.0.1:0";
  c.device = "cuda";
  Server server(c);
  server.start();
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server.health_port()), grpc::InsecureChannelCredentials()));
  auto status = [&] {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckResponse r;
    EXPECT_TRUE(health->Check(&ctx, grpc::health::v1::HealthCheckRequest{}, &r).ok());
    return r.status();
  };
  EXPECT_EQ(status(), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_NE(server.metrics_text().find("splitspec_device_lost 0"), std::string::npos);
  g_lose_device = true;
  const auto start = std::chrono::steady_clock::now();
  while (status() != grpc::health::v1::HealthCheckResponse::NOT_SERVING &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  auto stub = v1::SplitSpec::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  auto stream = stub->Session(&ctx);
  stream->Write(open_request(512));
  stream->WritesDone();
  const grpc::Status s = drain(*stream);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("device is lost"), std::string::npos) << s.error_message();
  const std::string metrics = server.metrics_text();
  EXPECT_NE(metrics.find("splitspec_device_lost 1"), std::string::npos);
  EXPECT_NE(metrics.find("splitspec_serving 0"), std::string::npos);
  EXPECT_NE(metrics.find("splitspec_backend_info{"), std::string::npos);
  server.shutdown();
}

}  // namespace
}  // namespace splitspec::test

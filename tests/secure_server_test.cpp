// A server for a cluster, over real sockets: TLS (with a certificate renewed
// while serving), mutual TLS, bearer tokens, the plaintext health port, and
// replicas sharing sessions, one of them drained by SIGTERM under load.
// Certificates are made per test with the openssl command.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "client/client.h"
#include "common/tokenizer/tokenizer.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/server.h"
#include "server/token_auth.h"
#include "tests/edge_cloud_util.h"

namespace splitspec {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

void sh(const std::string& cmd) {
  ASSERT_EQ(std::system((cmd + " >/dev/null 2>&1").c_str()), 0) << cmd;
}

// A CA `name` in `dir` and, signed by it, a server certificate for
// localhost and 127.0.0.1 and a client certificate (P-256 keys).
void make_pki(const TempDir& dir, const std::string& name) {
  const std::string d = dir.str() + "/";
  const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  sh("openssl req -x509" + key + " -keyout " + d + name + "-ca.key -out " + d + name + "-ca.pem -days 2 -subj /CN=" +
     name + "-ca");
  std::ofstream(d + "san.ext") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
  for (const std::string who : {"server", "client"}) {
    const std::string base = d + name + "-" + who;
    sh("openssl req" + key + " -keyout " + base + ".key -out " + base + ".csr -subj /CN=" + who);
    sh("openssl x509 -req -in " + base + ".csr -CA " + d + name + "-ca.pem -CAkey " + d + name +
       "-ca.key -CAcreateserial -days 2 -out " + base + ".pem" + (who == "server" ? " -extfile " + d + "san.ext" : ""));
  }
}

ServerConfig config(const std::string& listen = "127.0.0.1:0") {
  ServerConfig c;
  c.target_dir = test::demo_target_dir();
  c.listen = listen;
  c.compute_threads = 1;
  c.log_level = "warn";
  c.shutdown_grace_s = 5;
  return c;
}

// A server with TLS from CA `a`'s server certificate (made with make_pki).
ServerConfig tls_config(const TempDir& dir) {
  ServerConfig c = config();
  c.tls_cert = dir.str("a-server.pem");
  c.tls_key = dir.str("a-server.key");
  return c;
}

ClientOptions client_options(const std::string& address) {
  ClientOptions o;
  o.verifier = VerifierKind::kServer;
  o.drafter = "model";
  o.server = address;
  o.draft_dir = test::demo_draft_dir();
  o.threads = 1;
  o.connect_timeout = std::chrono::milliseconds(3000);
  // The token tests run on loopback, without TLS.
  o.allow_insecure_tokens = true;
  return o;
}

Request short_request() {
  Request r;
  r.max_new_tokens = 12;
  r.ignore_eos = true;
  return r;
}

// A generation through `o` gives exactly the target's greedy tokens.
void expect_exact(const ClientOptions& o) {
  const Tokenizer tok(test::demo_target_dir());
  const std::vector<int32_t> prompt = test::encode_prompt(tok, "The ship sailed");
  EXPECT_EQ(Client::connect(o)->generate_ids(prompt, short_request()).ids,
            test::demo_target_ids_of(prompt, short_request()));
}

std::string address_of(const Server& s) { return "127.0.0.1:" + std::to_string(s.port()); }

grpc::health::v1::HealthCheckResponse::ServingStatus health(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckResponse r;
  const grpc::Status s = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest{}, &r);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return r.status();
}

TEST(SecureServer, TlsServesItsCasClientsAndRefusesPlaintextAndAnotherCa) {
  TempDir dir;
  make_pki(dir, "a");
  make_pki(dir, "b");
  ServerConfig c = tls_config(dir);
  c.health_listen = "127.0.0.1:0";
  Server server(c);
  server.start();
  ClientOptions o = client_options(address_of(server));
  o.tls_ca = dir.str("a-ca.pem");
  expect_exact(o);
  // The name in the certificate, not the address, when they differ.
  ClientOptions named = o;
  named.server = "localhost:" + std::to_string(server.port());
  expect_exact(named);
  test::expect_connect_refused(client_options(address_of(server)), "needs the client's tls_ca");
  ClientOptions other = o;
  other.tls_ca = dir.str("b-ca.pem");
  test::expect_connect_refused(other, "the given CA signed");
  // Probes reach health in plaintext on its own port while TLS is on.
  ASSERT_GT(server.health_port(), 0);
  const test::CliRun info = test::run_cli("info --server localhost:" + std::to_string(server.port()) + " --tls-ca " +
                                          dir.str("a-ca.pem"));
  EXPECT_EQ(info.status, 0) << info.err;
  EXPECT_EQ(health("127.0.0.1:" + std::to_string(server.health_port())),
            grpc::health::v1::HealthCheckResponse::SERVING);
  server.shutdown();
}

// Tokens over TLS go through the same gate in the transport (the TLS
// credentials' AuthMetadataProcessor): no token or a wrong one is refused
// before any handler, health on the main port needs none.
TEST(SecureServer, TokensOverTlsAreCheckedByTheTransport) {
  TempDir dir;
  make_pki(dir, "a");
  std::ofstream(dir.str("tokens")) << "robot-7f3a\n";
  ServerConfig c = tls_config(dir);
  c.auth_tokens_file = dir.str("tokens");
  Server server(c);
  server.start();
  ClientOptions o = client_options(address_of(server));
  o.allow_insecure_tokens = false;
  o.tls_ca = dir.str("a-ca.pem");
  test::expect_connect_refused(o, "UNAUTHENTICATED");
  o.auth_token = "robot-7f3b";
  test::expect_connect_refused(o, "UNAUTHENTICATED: the bearer token was not accepted");
  o.auth_token = "robot-7f3a";
  expect_exact(o);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = test::read_file(dir.path() / "a-ca.pem");
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel("localhost:" + std::to_string(server.port()), grpc::SslCredentials(ssl)));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckResponse r;
  const grpc::Status s = health->Check(&ctx, grpc::health::v1::HealthCheckRequest{}, &r);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(r.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  server.shutdown();
}

TEST(SecureServer, MutualTlsNeedsAClientCertificateItsCaSigned) {
  TempDir dir;
  make_pki(dir, "a");
  make_pki(dir, "b");
  ServerConfig c = tls_config(dir);
  c.tls_client_ca = dir.str("a-ca.pem");
  Server server(c);
  server.start();
  ClientOptions o = client_options(address_of(server));
  o.tls_ca = dir.str("a-ca.pem");
  test::expect_connect_refused(o, "mutual TLS needs the client's certificate");
  ClientOptions stranger = o;
  stranger.tls_cert = dir.str("b-client.pem");
  stranger.tls_key = dir.str("b-client.key");
  test::expect_connect_refused(stranger, "cannot reach server");
  o.tls_cert = dir.str("a-client.pem");
  o.tls_key = dir.str("a-client.key");
  expect_exact(o);
  server.shutdown();
}

// tls_client_names narrows mutual TLS from "any certificate the CA signed"
// to certificates with a listed name: the CA's other clients are refused
// by the transport with PERMISSION_DENIED.
TEST(SecureServer, MutualTlsServesOnlyTheListedClientNames) {
  TempDir dir;
  make_pki(dir, "a");
  ServerConfig c = tls_config(dir);
  c.tls_client_ca = dir.str("a-ca.pem");
  c.tls_client_names = {"robot-7"};
  {
    Server server(c);
    server.start();
    ClientOptions o = client_options(address_of(server));
    o.tls_ca = dir.str("a-ca.pem");
    o.tls_cert = dir.str("a-client.pem");  // CN=client
    o.tls_key = dir.str("a-client.key");
    test::expect_connect_refused(o, "PERMISSION_DENIED");
    test::expect_connect_refused(o, "are not in the server's tls_client_names");
    server.shutdown();
  }
  c.tls_client_names = {"robot-7", "client"};
  Server server(c);
  server.start();
  ClientOptions o = client_options(address_of(server));
  o.tls_ca = dir.str("a-ca.pem");
  o.tls_cert = dir.str("a-client.pem");
  o.tls_key = dir.str("a-client.key");
  expect_exact(o);
  server.shutdown();
  ServerConfig no_ca = tls_config(dir);
  no_ca.tls_client_names = {"client"};
  EXPECT_NE(test::error_of([&] { no_ca.validate(); }).find("tls_client_names needs tls_client_ca"), std::string::npos);
}

TEST(SecureServer, ACertificateRenewedWhileServingIsServedWithoutARestart) {
  TempDir dir;
  make_pki(dir, "a");
  make_pki(dir, "b");
  fs::copy_file(dir.str("a-server.pem"), dir.str("live.pem"));
  fs::copy_file(dir.str("a-server.key"), dir.str("live.key"));
  ServerConfig c = config();
  c.tls_cert = dir.str("live.pem");
  c.tls_key = dir.str("live.key");
  c.tls_reload_s = 1;
  Server server(c);
  server.start();
  ClientOptions old_ca = client_options(address_of(server));
  old_ca.tls_ca = dir.str("a-ca.pem");
  ClientOptions new_ca = old_ca;
  new_ca.tls_ca = dir.str("b-ca.pem");
  expect_exact(old_ca);
  // The renewal, as cert-manager writes it: whole files, swapped in.
  fs::copy_file(dir.str("b-server.key"), dir.str("next.key"));
  fs::copy_file(dir.str("b-server.pem"), dir.str("next.pem"));
  fs::rename(dir.str("next.key"), dir.str("live.key"));
  fs::rename(dir.str("next.pem"), dir.str("live.pem"));
  EXPECT_TRUE(test::wait_until(
      [&] {
        try {
          Client::connect(new_ca);
          return true;
        } catch (const Error&) {
          return false;
        }
      },
      std::chrono::seconds(20)));
  expect_exact(new_ca);
  test::expect_connect_refused(old_ca, "the given CA signed");
  server.shutdown();
}

TEST(TokenAuthCheck, TokensFileAndConstantTimeMatch) {
  TempDir dir;
  std::ofstream(dir.str("tokens")) << "# robots\n\n  alpha-1 \nbeta-2\r\n";
  const auto auth = TokenAuth::from_file(dir.str("tokens"));
  EXPECT_TRUE(auth->accepts("alpha-1"));
  EXPECT_TRUE(auth->accepts("beta-2"));
  EXPECT_FALSE(auth->accepts("alpha-"));
  EXPECT_FALSE(auth->accepts("alpha-12"));
  EXPECT_FALSE(auth->accepts(""));
  EXPECT_FALSE(auth->accepts("# robots"));
  // The scheme's name in any case, as RFC 7235 has it; nothing else.
  EXPECT_EQ(TokenAuth::bearer("Bearer alpha-1"), "alpha-1");
  EXPECT_EQ(TokenAuth::bearer("bearer alpha-1"), "alpha-1");
  EXPECT_EQ(TokenAuth::bearer("BEARER   alpha-1"), "alpha-1");
  EXPECT_EQ(TokenAuth::bearer("Basic alpha-1"), std::nullopt);
  EXPECT_EQ(TokenAuth::bearer("Beareralpha-1"), std::nullopt);
  EXPECT_EQ(TokenAuth::bearer("alpha-1"), std::nullopt);
  std::ofstream(dir.str("empty")) << "# none yet\n";
  EXPECT_NE(test::error_of([&] { TokenAuth::from_file(dir.str("empty")); }).find("holds no token"), std::string::npos);
  EXPECT_NE(test::error_of([&] { TokenAuth::from_file(dir.str("missing")); }).find("cannot open"), std::string::npos);
}

// Rotation as Kubernetes does it: the mounted path is a symbolic link that
// the kubelet points at a new directory. The new tokens are honoured and the
// old ones refused, without a restart; a file gone or empty mid-rotation
// keeps the tokens in force rather than locking every robot out.
TEST(TokenAuthCheck, ARotatedTokensFileIsHonouredWithoutARestart) {
  TempDir dir;
  fs::create_directories(dir.path() / "v1");
  fs::create_directories(dir.path() / "v2");
  std::ofstream(dir.str("v1/tokens")) << "robot-old\n";
  std::ofstream(dir.str("v2/tokens")) << "robot-new\nrobot-spare\n";
  fs::create_symlink(dir.path() / "v1", dir.path() / "data");
  const auto auth = TokenAuth::from_file(dir.str("data/tokens"), std::chrono::milliseconds(1));
  EXPECT_TRUE(auth->accepts("robot-old"));
  const auto after_reload_interval = [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); };
  fs::remove(dir.path() / "data");
  fs::create_symlink(dir.path() / "v2", dir.path() / "data");
  after_reload_interval();
  EXPECT_TRUE(auth->accepts("robot-new"));
  EXPECT_TRUE(auth->accepts("robot-spare"));
  EXPECT_FALSE(auth->accepts("robot-old"));
  fs::remove(dir.path() / "data");  // mid-rotation: no file at all
  after_reload_interval();
  EXPECT_TRUE(auth->accepts("robot-new"));
  std::ofstream(dir.str("v1/tokens"), std::ios::trunc) << "# emptied\n";
  fs::create_symlink(dir.path() / "v1", dir.path() / "data");
  after_reload_interval();
  EXPECT_TRUE(auth->accepts("robot-new"));
  std::ofstream(dir.str("v1/tokens"), std::ios::trunc) << "robot-third\n";
  after_reload_interval();
  EXPECT_TRUE(auth->accepts("robot-third"));
  EXPECT_FALSE(auth->accepts("robot-new"));
}

TEST(TokenAuthCheck, EveryRpcButHealthNeedsAnAcceptedToken) {
  TempDir dir;
  std::ofstream(dir.str("tokens")) << "robot-7f3a\n";
  std::ofstream(dir.str("token")) << "robot-7f3a\n";
  ServerConfig c = config();
  c.auth_tokens_file = dir.str("tokens");
  // Tokens over plaintext only when asked for, on either side.
  EXPECT_NE(test::error_of([&] { Server refused(c); }).find("auth_tokens_file on a plaintext port"), std::string::npos);
  c.allow_insecure_tokens = true;
  Server server(c);
  server.start();
  const std::string address = address_of(server);
  {
    ClientOptions careful = client_options(address);
    careful.allow_insecure_tokens = false;
    careful.auth_token = "robot-7f3a";
    EXPECT_NE(test::error_of([&] { Client::connect(careful); }).find("a bearer token over plaintext"), std::string::npos);
  }
  test::expect_connect_refused(client_options(address), "UNAUTHENTICATED");
  ClientOptions wrong = client_options(address);
  wrong.auth_token = "robot-7f3b";
  test::expect_connect_refused(wrong, "UNAUTHENTICATED: the bearer token was not accepted");
  ClientOptions right = client_options(address);
  right.auth_token_file = dir.str("token");
  expect_exact(right);
  ClientOptions cloud = right;
  cloud.drafter = "none";  // cloud-ar: the Generate RPC
  expect_exact(cloud);
  // Session and Generate refuse a caller without a token, not just GetInfo.
  {
    auto stub = test::raw_stub(address);
    grpc::ClientContext ctx;
    v1::GenerationRequest req;
    req.add_prompt_ids(1);
    req.set_vocab_size(4096);
    req.set_max_new_tokens(2);
    auto reader = stub->Generate(&ctx, req);
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    auto stub = test::raw_stub(address);
    grpc::ClientContext ctx;
    auto stream = stub->Session(&ctx);
    v1::SessionResponse r;
    EXPECT_FALSE(stream->Read(&r));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    // The vocabulary goes only to callers with a token too.
    auto stub = test::raw_stub(address);
    grpc::ClientContext ctx;
    auto reader = stub->GetTokenizer(&ctx, v1::GetTokenizerRequest{});
    v1::TokenizerChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    // The scheme's name is case-insensitive.
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "bearer robot-7f3a");
    v1::ServerInfo info;
    EXPECT_TRUE(test::raw_stub(address)->GetInfo(&ctx, v1::GetInfoRequest{}, &info).ok());
  }
  EXPECT_EQ(health(address), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_NE(server.metrics_text().find("splitspec_unauthenticated_requests_total 5"), std::string::npos)
      << server.metrics_text();
  // The operator's commands take the token too; health needs none.
  const test::CliRun refused = test::run_cli("info --server " + address);
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.err.find("UNAUTHENTICATED"), std::string::npos) << refused.err;
  const test::CliRun careless = test::run_cli("info --server " + address + " --auth-token-file " + dir.str("token"));
  EXPECT_NE(careless.status, 0);
  EXPECT_NE(careless.err.find("allow-insecure-tokens"), std::string::npos) << careless.err;
  const test::CliRun info =
      test::run_cli("info --server " + address + " --auth-token-file " + dir.str("token") + " --allow-insecure-tokens");
  EXPECT_EQ(info.status, 0) << info.err;
  EXPECT_NE(info.out.find("\"model_name\""), std::string::npos) << info.out;
  EXPECT_EQ(test::run_cli("health --server " + address).status, 0);
  server.shutdown();
}

TEST(TokenAuthCheck, TheServerHonoursARotatedTokenWithoutARestart) {
  TempDir dir;
  std::ofstream(dir.str("tokens")) << "robot-old\n";
  ServerConfig c = config();
  c.auth_tokens_file = dir.str("tokens");
  c.allow_insecure_tokens = true;
  c.tls_reload_s = 1;
  Server server(c);
  server.start();
  ClientOptions old_token = client_options(address_of(server));
  old_token.auth_token = "robot-old";
  ClientOptions new_token = old_token;
  new_token.auth_token = "robot-new";
  expect_exact(old_token);
  test::expect_connect_refused(new_token, "UNAUTHENTICATED");
  // Written aside and renamed in, as a Secret's files are swapped.
  std::ofstream(dir.str("tokens.next")) << "robot-new\n";
  fs::rename(dir.path() / "tokens.next", dir.path() / "tokens");
  ASSERT_TRUE(test::wait_until(
      [&] {
        try {
          return Client::connect(new_token) != nullptr;
        } catch (const Error&) {
          return false;
        }
      },
      std::chrono::seconds(10)));
  expect_exact(new_token);
  test::expect_connect_refused(old_token, "UNAUTHENTICATED");
  server.shutdown();
}

TEST(Replicas, TwoServersOnLoopbackShareTheSessionsOfOneClient) {
  Server a(config()), b(config());
  a.start();
  b.start();
  ClientOptions o = client_options(address_of(a) + "," + address_of(b));
  auto client = Client::connect(o);
  const Tokenizer tok(test::demo_target_dir());
  for (int i = 0; i < 6; ++i) {
    const std::vector<int32_t> prompt = test::encode_prompt(tok, test::test_prompts()[i]);
    EXPECT_EQ(client->generate_ids(prompt, short_request()).ids, test::demo_target_ids_of(prompt, short_request()))
        << "prompt " << i;
  }
  const int64_t on_a = test::server_stats(address_of(a)).sessions_total();
  const int64_t on_b = test::server_stats(address_of(b)).sessions_total();
  EXPECT_EQ(on_a + on_b, 6);
  EXPECT_GE(on_a, 2);
  EXPECT_GE(on_b, 2);
  test::expect_connect_refused(client_options(address_of(a) + ",localhost:1"), "must be an IPv4 HOST:PORT");
  a.shutdown();
  b.shutdown();
}

// Kubernetes' rolling update in small: SIGTERM to one of two replicas while
// four robots generate. Its streams drain; its health turns NOT_SERVING, so
// new sessions go to the other; no generation fails or differs.
TEST(Replicas, ASigtermedReplicaDrainsUnderLoadWithNoFailedGeneration) {
  TempDir tmp_a, tmp_b;
  std::unique_ptr<test::Child> child_a, child_b;
  const std::string a = test::spawn_server(test::demo_target_dir(), tmp_a, child_a, {"--shutdown-grace-s", "10"});
  const std::string b = test::spawn_server(test::demo_target_dir(), tmp_b, child_b, {"--shutdown-grace-s", "10"});
  const Tokenizer tok(test::demo_target_dir());
  Request req = short_request();
  req.max_new_tokens = 24;
  std::vector<std::vector<int32_t>> prompts, want;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(test::encode_prompt(tok, test::test_prompts()[i]));
    want.push_back(test::demo_target_ids_of(prompts.back(), req));
  }
  std::atomic<int> done{0}, failed{0}, wrong{0};
  std::atomic<bool> stop{false};
  std::vector<std::string> errors(4);
  std::vector<std::thread> robots;
  for (int r = 0; r < 4; ++r)
    robots.emplace_back([&, r] {
      try {
        ClientOptions o = client_options(a + "," + b);
        o.drafter = r == 3 ? "none" : "model";
        auto client = Client::connect(o);
        while (!stop) {
          const Result got = client->generate_ids(prompts[r], req);
          if (got.ids != want[r]) wrong += 1;
          done += 1;
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
        failed += 1;
      }
    });
  ASSERT_TRUE(test::wait_until([&] { return done.load() >= 8; }, std::chrono::seconds(60)));
  EXPECT_GT(test::server_stats(a).sessions_total(), 0);
  child_a->signal(SIGTERM);
  const std::optional<int> exit_a = child_a->wait(std::chrono::seconds(30));
  const int at_term = done.load();
  ASSERT_TRUE(test::wait_until([&] { return done.load() >= at_term + 8; }, std::chrono::seconds(60)));
  stop = true;
  for (auto& t : robots) t.join();
  EXPECT_EQ(exit_a, std::optional<int>(0));
  EXPECT_EQ(failed.load(), 0) << errors[0] << errors[1] << errors[2] << errors[3];
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(test::server_stats(b).sessions_total(), 0);
  child_b->signal(SIGTERM);
  EXPECT_EQ(child_b->wait(std::chrono::seconds(30)), std::optional<int>(0));
}

}  // namespace
}  // namespace splitspec

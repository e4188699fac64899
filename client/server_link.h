#pragma once
// A connection to splitspec-server: the channel, what its GetInfo said, the
// wire form of a generation request, and errors that name the server.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/client_options.h"
#include "common/decoding/generate_options.h"
#include "common/util/error.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/splitspec.grpc.pb.h"
#include "proto/status_name.h"

namespace splitspec {

// How the channel reaches the server: TLS when `ca_pem` is set (with a
// client certificate for mutual TLS), and a bearer token sent with every call.
struct LinkSecurity {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
  std::string server_name;  // the name the certificate must carry, when not the address's host
  std::string token;
};

// The security ClientOptions ask for, its files read; throws
// splitspec::Error naming a file that cannot be read or a bad combination.
LinkSecurity link_security(const ClientOptions& options);

// A channel to `address` (as ServerLink takes it) with `security`: TLS or
// plaintext, and the bearer token on every call.
std::shared_ptr<grpc::Channel> secure_channel(const std::string& address, const LinkSecurity& security,
                                              grpc::ChannelArguments args = {});

class ServerLink {
 public:
  // Connects within `timeout` and asks GetInfo; throws splitspec::Error for
  // an unreachable server or one shutting down. `address` is HOST:PORT, a
  // comma-separated list of IPv4 HOST:PORT replicas, or a gRPC target URI
  // (dns:///name:port resolving to several); sessions are spread over the
  // replicas round robin, skipping those whose health is not SERVING (a
  // draining one), and each stream stays on its replica.
  ServerLink(const std::string& address, std::chrono::milliseconds timeout, const LinkSecurity& security = {});
  // Offline start: as above, but a server that cannot be reached is no
  // error. The link then stands in with `stand_in` (what the fallback target
  // says of itself) until the server is first reached, and check_same_target
  // confirms it then.
  ServerLink(const std::string& address, std::chrono::milliseconds timeout, const LinkSecurity& security,
             v1::ServerInfo stand_in);

  const std::string& address() const { return address_; }
  v1::SplitSpec::Stub& stub() { return *stub_; }
  // As of connecting, or the stand-in while the server is unconfirmed.
  const v1::ServerInfo& info() const { return info_; }
  // Whether the server has been reached and its target checked.
  bool confirmed() const { return confirmed_.load(); }
  // Checks run on the server's GetInfo when an offline-started link first
  // reaches it (what connecting would have refused); they throw
  // splitspec::Error.
  void on_confirm(std::function<void(const v1::ServerInfo&)> check) { confirm_check_ = std::move(check); }
  // Asks again.
  v1::ServerInfo fetch_info(std::chrono::milliseconds timeout);
  // Whether the channel is (or gets, before `until`) connected: after a
  // break, the server is back. `refused_ends`: a refused connection (nothing
  // listens there now) answers false at once instead of waiting on. `stop`
  // (a cancel) is asked every few ms and ends the wait with false.
  bool wait_connected(std::chrono::steady_clock::time_point until, bool refused_ends,
                      const std::function<bool()>& stop);
  // Asks GetInfo again and throws splitspec::Error unless the server still
  // serves the target it served at connect (name, vocabulary, tokenizer,
  // context, hidden size, weights, numerics): a generation moved back to a
  // restarted server must not go on with another model, nor with the same
  // one computed otherwise (a GPU server restarted on CPUs). An unconfirmed link compares
  // what its stand-in knows (vocabulary, tokenizer, hidden size, weights, KV
  // cache), runs the on_confirm checks, and is confirmed.
  void check_same_target(std::chrono::milliseconds timeout);
  // Whether grpc.health.v1 says SERVING within `timeout`.
  bool serving(std::chrono::milliseconds timeout);

  // "server HOST:PORT: <what>: <code>: <message> (<hint>)".
  Error error(const std::string& what, const grpc::Status& s) const;
  // "server HOST:PORT: <what>".
  Error error(const std::string& what) const;

 private:
  void open_channel(const LinkSecurity& security);
  // Waits for the channel and asks GetInfo; throws as the constructor does.
  void reach(std::chrono::milliseconds timeout, const LinkSecurity& security);

  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::SplitSpec::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  v1::ServerInfo info_;
  LinkSecurity security_;
  std::atomic<bool> confirmed_{true};
  std::function<void(const v1::ServerInfo&)> confirm_check_;
};

// What to generate, as Open and Generate carry it.
v1::GenerationRequest generation_request(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                         int64_t vocab, const std::string& tokenizer_fingerprint);

// The prompt checks a server would make, made here first (so that no draft
// prefills a prompt the server is going to refuse): every id in the
// vocabulary, room left in the target's context.
void check_prompt_for_server(const std::vector<int32_t>& prompt, int64_t vocab, int64_t context);

}  // namespace splitspec

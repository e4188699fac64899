#pragma once
// The client's end of one Session stream on gRPC's callback API: messages
// sent from any thread are written in order, one at a time; responses are
// queued for whoever waits in next(). Later modes read early verdicts on
// gRPC's thread while workers draft, which is why this is not the blocking API.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "proto/splitspec.grpc.pb.h"

namespace splitspec {

class SessionStream final : public grpc::ClientBidiReactor<v1::SessionRequest, v1::SessionResponse> {
 public:
  // Early verdicts (final == false) go to `on_early`, on gRPC's thread, the
  // moment they arrive; everything else waits for next(). A handler that
  // returns false (a malformed verdict) cancels the call.
  using EarlyHandler = std::function<bool(const v1::RoundVerdict&)>;
  SessionStream(v1::SplitSpec::Stub& stub, std::chrono::system_clock::time_point deadline, EarlyHandler on_early = {});
  // Cancels the call if it is still open and waits for gRPC to let go.
  ~SessionStream() override;

  void send(v1::SessionRequest msg);
  // The next response, or nullopt once the stream has ended (see status())
  // or at `until` (then ended() is false).
  std::optional<v1::SessionResponse> next(
      std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());
  bool ended();
  // Ends the call from any thread; a waiting next() returns.
  void cancel() { context_.TryCancel(); }
  // The call's final status; waits for the end of the call.
  grpc::Status status();
  // No more messages will be sent.
  void done_sending();

 private:
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& s) override;

  grpc::ClientContext context_;
  EarlyHandler on_early_;
  v1::SessionResponse in_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::SessionRequest> out_;
  bool writing_ = false;
  bool holding_ = true;  // our hold lets the main thread start writes after reads ended
  std::deque<v1::SessionResponse> received_;
  bool reads_done_ = false;
  bool done_ = false;
  grpc::Status status_;
};

}  // namespace splitspec

#include "client/session_stream.h"

namespace splitspec {

SessionStream::SessionStream(v1::SplitSpec::Stub& stub, std::chrono::system_clock::time_point deadline,
                             EarlyHandler on_early)
    : on_early_(std::move(on_early)) {
  context_.set_deadline(deadline);
  stub.async()->Session(&context_, this);
  AddHold();
  StartRead(&in_);
  StartCall();
}

SessionStream::~SessionStream() {
  done_sending();
  context_.TryCancel();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

void SessionStream::send(v1::SessionRequest msg) {
  const v1::SessionRequest* start = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!holding_) return;  // sending has ended
    out_.push_back(std::move(msg));
    if (!writing_) {
      writing_ = true;
      start = &out_.front();
    }
  }
  if (start) StartWrite(start);
}

void SessionStream::OnWriteDone(bool ok) {
  const v1::SessionRequest* next = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out_.pop_front();
    if (!ok) out_.clear();  // the call is over; its status says why
    if (!out_.empty())
      next = &out_.front();
    else
      writing_ = false;
  }
  if (next) StartWrite(next);
}

void SessionStream::done_sending() {
  bool release;
  {
    std::lock_guard<std::mutex> lock(mu_);
    release = holding_;
    holding_ = false;
  }
  if (release) RemoveHold();
}

void SessionStream::OnReadDone(bool ok) {
  if (ok && on_early_ && in_.has_verdict() && !in_.verdict().final()) {
    // After a cancel the read fails at once, which ends next()'s wait.
    if (!on_early_(in_.verdict())) context_.TryCancel();
    StartRead(&in_);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ok)
      received_.push_back(std::move(in_));
    else
      reads_done_ = true;
  }
  cv_.notify_all();
  if (ok) StartRead(&in_);
}

void SessionStream::OnDone(const grpc::Status& s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = s;
    reads_done_ = true;
    done_ = true;
    // Under the lock: once it is released the destructor may free cv_.
    cv_.notify_all();
  }
}

std::optional<v1::SessionResponse> SessionStream::next(std::chrono::steady_clock::time_point until) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto ready = [&] { return !received_.empty() || reads_done_; };
  if (until == std::chrono::steady_clock::time_point::max())
    cv_.wait(lock, ready);
  else
    cv_.wait_until(lock, until, ready);
  if (received_.empty()) return std::nullopt;
  v1::SessionResponse r = std::move(received_.front());
  received_.pop_front();
  return r;
}

bool SessionStream::ended() {
  std::lock_guard<std::mutex> lock(mu_);
  return received_.empty() && reads_done_;
}

grpc::Status SessionStream::status() {
  done_sending();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return status_;
}

}  // namespace splitspec

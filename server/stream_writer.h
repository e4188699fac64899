#pragma once
// What every streaming reactor of the server needs on top of gRPC's callback
// API: a queue of outgoing messages ordered by priority (FIFO among equals)
// with one write in flight, a Finish that waits for that queue, a hook the
// moment the stream's end is decided (before the peer can learn of it), and a
// lifetime that outlasts OnDone while compute jobs still refer to the reactor.
// Messages wait here, not in the compute path: a slow network delays early
// verdicts, never the forward that produces them.
//
// gRPC calls are never made under mu_, so a reaction that gRPC runs inline
// cannot deadlock on it.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <limits>
#include <list>
#include <mutex>
#include <optional>

namespace splitspec {

template <class Reactor, class Response>
class StreamWriter : public Reactor {
 protected:
  static constexpr double kFirst = std::numeric_limits<double>::infinity();

  // Queues `msg` ahead of queued messages of lower priority and behind the
  // rest; dropped once the stream is closing.
  void send(Response msg, double priority = kFirst) {
    const Response* start = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (status_) return;
      auto at = out_.begin();
      if (writing_) ++at;  // the message being written stays first
      while (at != out_.end() && at->priority >= priority) ++at;
      out_.insert(at, Entry{priority, std::move(msg)});
      if (!writing_) {
        writing_ = true;
        start = &out_.front().msg;
      }
    }
    if (start) this->StartWrite(start);
  }

  // Removes queued (not yet written) messages for which `stale` holds.
  void drop_queued(const std::function<bool(const Response&)>& stale) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = out_.begin();
    if (writing_ && it != out_.end()) ++it;
    while (it != out_.end()) it = stale(it->msg) ? out_.erase(it) : std::next(it);
  }

  // Ends the stream with `status` once queued messages are written; the first
  // call decides the status.
  void close(grpc::Status status) {
    bool finish_now = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (status_) return;
      status_ = std::move(status);
      finish_now = !writing_;
      finished_ = finish_now;
    }
    on_closed(*status_);
    if (finish_now) this->Finish(*status_);
  }

  // Called once, with the stream's status, when its end has been decided,
  // before Finish: a peer that has its status finds the server done with the
  // stream.
  virtual void on_closed(const grpc::Status&) {}

  bool closing() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_.has_value();
  }
  bool cancelled() const { return cancelled_.load(); }

  // A compute job in flight holds the reactor: it is deleted only after OnDone
  // and the last release.
  void hold() {
    std::lock_guard<std::mutex> lock(mu_);
    ++holds_;
  }
  void release() {
    bool del;
    {
      std::lock_guard<std::mutex> lock(mu_);
      del = --holds_ == 0 && done_;
    }
    if (del) delete this;
  }

  std::mutex mu_;

 private:
  void OnWriteDone(bool ok) override {
    const Response* next = nullptr;
    bool finish_now = false, closed_now = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      out_.pop_front();
      if (!ok) {
        // The peer is gone: nothing more can be written.
        out_.clear();
        if (!status_) {
          status_ = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
          closed_now = true;
        }
      }
      if (!out_.empty()) {
        next = &out_.front().msg;
      } else {
        writing_ = false;
        finish_now = status_.has_value() && !finished_;
        finished_ = finished_ || finish_now;
      }
    }
    if (closed_now) on_closed(*status_);
    if (next) this->StartWrite(next);
    if (finish_now) this->Finish(*status_);
  }

  void OnCancel() override {
    cancelled_ = true;
    close(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    bool del;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      del = holds_ == 0;
    }
    if (del) delete this;
  }

  struct Entry {
    double priority;
    Response msg;
  };
  std::list<Entry> out_;
  bool writing_ = false;
  std::optional<grpc::Status> status_;
  bool finished_ = false;
  bool done_ = false;
  int holds_ = 0;
  std::atomic<bool> cancelled_{false};
};

}  // namespace splitspec

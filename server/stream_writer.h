#pragma once
// What every streaming reactor of the server needs on top of gRPC's callback
// API: a queue of outgoing messages ordered by priority (FIFO among equals)
// with one write in flight, a Finish that waits for that queue, a hook the
// moment the stream's end is decided (before the peer can learn of it), and a
// lifetime that outlasts OnDone while compute jobs still refer to the reactor.
// Messages wait here, not in the compute path: a slow network delays early
// verdicts, never the forward that produces them. The queue is bounded in
// bytes: a peer that stops reading is cancelled once it is full, never
// buffered without end.
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
#include <string>

#include <google/protobuf/message_lite.h>

namespace splitspec {

// What a queued message costs: its wire size (tests queue plain strings).
inline size_t message_bytes(const google::protobuf::MessageLite& m) { return m.ByteSizeLong(); }
inline size_t message_bytes(const std::string& s) { return s.size(); }

template <class Reactor, class Response>
class StreamWriter : public Reactor {
 protected:
  static constexpr double kFirst = std::numeric_limits<double>::infinity();

  // Bounds the bytes queued behind the write in flight: past `bytes` the
  // stream ends with RESOURCE_EXHAUSTED and `call` is cancelled (a write
  // its peer does not read never completes, so nothing else would end it).
  void bound_queue(grpc::CallbackServerContext* call, size_t bytes) {
    call_ = call;
    max_queued_ = bytes;
  }

  // Called once, outside the lock, when the queue overflowed; the stream is
  // closing.
  virtual void on_overflow(size_t queued_bytes) { (void)queued_bytes; }

  // Queues `msg` ahead of queued messages of lower priority and behind the
  // rest; dropped once the stream is closing.
  void send(Response msg, double priority = kFirst) {
    const Response* start = nullptr;
    const size_t bytes = message_bytes(msg);
    size_t overflow = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (status_ || overflowed_) return;
      if (queued_ + bytes > max_queued_) {
        overflow = queued_ + bytes;
        overflowed_ = true;
      } else {
        auto at = out_.begin();
        if (writing_) ++at;  // the message being written stays first
        while (at != out_.end() && at->priority >= priority) ++at;
        out_.insert(at, Entry{priority, bytes, std::move(msg)});
        queued_ += bytes;
        if (!writing_) {
          writing_ = true;
          start = &out_.front().msg;
        }
      }
    }
    if (overflow) {
      on_overflow(overflow);
      close(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                         "the client did not read its stream: " + std::to_string(overflow) +
                             " bytes were waiting to be sent, over the server's max_send_queue_bytes"));
      if (call_) call_->TryCancel();
      return;
    }
    if (start) this->StartWrite(start);
  }

  // Removes queued (not yet written) messages for which `stale` holds.
  void drop_queued(const std::function<bool(const Response&)>& stale) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = out_.begin();
    if (writing_ && it != out_.end()) ++it;
    while (it != out_.end()) {
      if (stale(it->msg)) {
        queued_ -= it->bytes;
        it = out_.erase(it);
      } else {
        ++it;
      }
    }
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
      queued_ -= out_.front().bytes;
      out_.pop_front();
      if (!ok) {
        // The peer is gone: nothing more can be written.
        out_.clear();
        queued_ = 0;
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
    size_t bytes;
    Response msg;
  };
  std::list<Entry> out_;
  size_t queued_ = 0;  // bytes of out_
  size_t max_queued_ = std::numeric_limits<size_t>::max();
  bool overflowed_ = false;
  grpc::CallbackServerContext* call_ = nullptr;
  bool writing_ = false;
  std::optional<grpc::Status> status_;
  bool finished_ = false;
  bool done_ = false;
  int holds_ = 0;
  std::atomic<bool> cancelled_{false};
};

}  // namespace splitspec

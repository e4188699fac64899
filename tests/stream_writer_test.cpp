// The server's outgoing queue (StreamWriter) driven step by step over a
// stand-in for gRPC's reactor, so every interleaving is chosen, not raced:
// one write in flight, the rest by priority (FIFO among equals), stale
// messages dropped, Finish only once the queue is written, a vanished peer
// ending the stream, and the reactor freed after OnDone and its last hold.
#include "server/stream_writer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace splitspec {
namespace {

// What StreamWriter needs of a gRPC reactor, recording the calls.
struct FakeReactor {
  virtual ~FakeReactor() = default;
  void StartWrite(const std::string* msg) { writes.push_back(*msg); }
  void Finish(const grpc::Status& s) {
    finished += 1;
    status = s;
  }
  virtual void OnWriteDone(bool) {}
  virtual void OnCancel() {}
  virtual void OnDone() {}

  std::vector<std::string> writes;
  int finished = 0;
  grpc::Status status;
};

// gRPC calls the reactions through the reactor's interface.
FakeReactor& grpc_side(FakeReactor* r) { return *r; }

struct Writer final : StreamWriter<FakeReactor, std::string> {
  using StreamWriter::close;
  using StreamWriter::drop_queued;
  using StreamWriter::hold;
  using StreamWriter::kFirst;
  using StreamWriter::release;
  using StreamWriter::bound_queue;
  using StreamWriter::send;
  void on_overflow(size_t bytes) override { overflows.push_back(bytes); }
  std::vector<size_t> overflows;
  bool* deleted = nullptr;
  ~Writer() override {
    if (deleted) *deleted = true;
  }
};

TEST(StreamWriter, OneWriteInFlightTheRestByPriorityFifoAmongEquals) {
  auto* w = new Writer;
  w->send("first");  // starts at once
  w->send("low", 1);
  w->send("high", 5);
  w->send("mid-a", 3);
  w->send("mid-b", 3);
  w->send("urgent");  // kFirst: ahead of everything queued, never of the write in flight
  EXPECT_EQ(w->writes, std::vector<std::string>{"first"});
  for (int i = 0; i < 5; ++i) grpc_side(w).OnWriteDone(true);
  EXPECT_EQ(w->writes, (std::vector<std::string>{"first", "urgent", "high", "mid-a", "mid-b", "low"}));
  grpc_side(w).OnWriteDone(true);
  EXPECT_EQ(w->finished, 0) << "nothing asked it to finish";
  w->close(grpc::Status::OK);
  EXPECT_EQ(w->finished, 1) << "an idle stream finishes at once";
  bool deleted = false;
  w->deleted = &deleted;
  grpc_side(w).OnDone();
  EXPECT_TRUE(deleted);
}

TEST(StreamWriter, StaleMessagesAreDroppedButNotTheOneInFlight) {
  auto* w = new Writer;
  w->send("early-1", 2);
  w->send("early-2", 1);
  w->send("final");
  w->drop_queued([](const std::string& m) { return m.rfind("early", 0) == 0; });
  grpc_side(w).OnWriteDone(true);
  grpc_side(w).OnWriteDone(true);
  EXPECT_EQ(w->writes, (std::vector<std::string>{"early-1", "final"}));
  w->close(grpc::Status::OK);
  grpc_side(w).OnDone();
}

TEST(StreamWriter, FinishWaitsForTheQueueAndTheFirstCloseDecides) {
  auto* w = new Writer;
  w->send("a");
  w->send("b");
  w->close(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad draft"));
  w->close(grpc::Status::OK);  // too late: the first status stands
  w->send("c");                // dropped: the stream is closing
  EXPECT_EQ(w->finished, 0) << "queued messages go out first";
  grpc_side(w).OnWriteDone(true);
  EXPECT_EQ(w->finished, 0);
  grpc_side(w).OnWriteDone(true);
  EXPECT_EQ(w->finished, 1);
  EXPECT_EQ(w->status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(w->writes, (std::vector<std::string>{"a", "b"}));
  grpc_side(w).OnDone();
}

TEST(StreamWriter, AVanishedPeerEndsTheStreamCancelled) {
  auto* w = new Writer;
  w->send("a");
  w->send("b");
  grpc_side(w).OnWriteDone(false);  // the write failed: nobody is listening
  EXPECT_EQ(w->finished, 1);
  EXPECT_EQ(w->status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(w->writes, std::vector<std::string>{"a"});
  grpc_side(w).OnDone();
}

TEST(StreamWriter, AHeldReactorOutlivesOnDoneUntilItsLastRelease) {
  auto* w = new Writer;
  bool deleted = false;
  w->deleted = &deleted;
  w->hold();  // a compute job in flight
  grpc_side(w).OnCancel();
  EXPECT_EQ(w->finished, 1);
  EXPECT_EQ(w->status.error_code(), grpc::StatusCode::CANCELLED);
  grpc_side(w).OnDone();
  EXPECT_FALSE(deleted) << "the job still refers to it";
  w->release();
  EXPECT_TRUE(deleted);
}

// A peer that stops reading: past the bound, the stream ends with
// RESOURCE_EXHAUSTED (once, however many sends follow), nothing more is
// queued, and the writes gRPC then fails end it.
TEST(StreamWriter, AFullQueueEndsTheStreamInsteadOfGrowing) {
  auto* w = new Writer;
  w->bound_queue(nullptr, 10);
  w->send("aaaa");  // in flight
  w->send("bbbb");
  w->send("cccccc");  // 14 bytes: over
  w->send("d");
  EXPECT_EQ(w->overflows, std::vector<size_t>{14});
  EXPECT_EQ(w->writes, std::vector<std::string>{"aaaa"});
  grpc_side(w).OnWriteDone(false);  // the call was cancelled
  EXPECT_EQ(w->finished, 1);
  EXPECT_EQ(w->status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(w->status.error_message().find("max_send_queue_bytes"), std::string::npos);
  grpc_side(w).OnDone();
}

// Within the bound, written messages make room for new ones.
TEST(StreamWriter, WrittenMessagesMakeRoomInTheBoundedQueue) {
  auto* w = new Writer;
  w->bound_queue(nullptr, 10);
  for (int i = 0; i < 20; ++i) {
    w->send("abcd");
    w->send("efgh");
    grpc_side(w).OnWriteDone(true);
    grpc_side(w).OnWriteDone(true);
  }
  EXPECT_TRUE(w->overflows.empty());
  EXPECT_EQ(w->writes.size(), 40u);
  w->close(grpc::Status::OK);
  EXPECT_EQ(w->finished, 1);
  grpc_side(w).OnDone();
}

}  // namespace
}  // namespace splitspec

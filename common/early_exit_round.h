#pragma once
// One verification round's early exits, computed beside the forward on a
// worker of their own: the forward hands each exit its rows and goes on, so
// that on a server with a core to spare an exit costs the forward a copy of a
// few rows, not its own compute. Where client and server share two cores it
// saves nothing: the worker's memory traffic slows the forward about as much
// as computing the exit inline (splitspec bench exits compares the two).
#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

#include "common/compute_queue.h"
#include "common/early_verdict.h"

namespace splitspec {

class ExitRound {
 public:
  using Sink = std::function<void(const EarlyVerdict&)>;
  // Every argument must outlive finish(); `sink` runs on the worker.
  ExitRound(ComputeQueue& worker, const Model& model, const EarlyExits& exits, const DraftTree& tree,
            const SamplingParams& params, Sink sink);
  ~ExitRound() { finish(); }
  ExitRound(const ExitRound&) = delete;
  ExitRound& operator=(const ExitRound&) = delete;

  // From the forward: verify the draft at the exit after `after_layer`
  // layers, for `rows` as TargetDecoder's tap gives them, with `rng` as it
  // stood there.
  void tap(int64_t after_layer, const at::Tensor& rows, const Rng& rng);
  // The round is decided: exits not yet started are dropped and one running
  // is waited for, its verdict not delivered. Returns the milliseconds the
  // worker spent on this round's exits.
  double finish();

 private:
  // Shared with queued jobs, which may start after finish() and must then
  // touch nothing else.
  struct State {
    std::mutex mu;
    std::condition_variable idle;
    int running = 0;
    bool ended = false;
    double ms = 0;
  };
  ComputeQueue& worker_;
  const Model& model_;
  const EarlyExits& exits_;
  const DraftTree& tree_;
  const SamplingParams& params_;
  Sink sink_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace splitspec

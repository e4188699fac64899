#include "common/early_exit_round.h"

#include <ATen/ATen.h>

#include <optional>

#include "common/stopwatch.h"

namespace splitspec {

ExitRound::ExitRound(ComputeQueue& worker, const Model& model, const EarlyExits& exits, const DraftTree& tree,
                     const SamplingParams& params, Sink sink)
    : worker_(worker), model_(model), exits_(exits), tree_(tree), params_(params), sink_(std::move(sink)) {}

void ExitRound::tap(int64_t after_layer, const at::Tensor& rows, const Rng& rng) {
  worker_.post([this, state = state_, after_layer, rows, rng] {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->ended) return;
      state->running += 1;
    }
    const auto t0 = SteadyClock::now();
    std::optional<EarlyVerdict> e;
    try {
      e = verify_at_exit(model_, exits_, exits_.index_of(after_layer), rows, tree_, params_, rng);
    } catch (const std::exception&) {
      // Only a prediction: the round goes on without it, as if it missed.
    }
    std::lock_guard<std::mutex> lock(state->mu);
    state->ms += ms_since(t0);
    if (e && !state->ended) sink_(*e);
    state->running -= 1;
    state->idle.notify_all();
  });
}

double ExitRound::finish() {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->ended = true;
  state_->idle.wait(lock, [&] { return state_->running == 0; });
  return state_->ms;
}

}  // namespace splitspec

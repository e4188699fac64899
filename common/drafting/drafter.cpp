#include "common/drafting/drafter.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/util/error.h"
#include "common/util/stopwatch.h"

namespace splitspec {

void Drafter::begin(const std::vector<int32_t>& prompt, const DraftParams& params) {
  if (prompt.empty()) throw Error("prompt is empty: give at least one token (e.g. BOS)");
  params.sampling.validate();
  const auto t0 = SteadyClock::now();
  params_ = params;
  position_ = static_cast<int64_t>(prompt.size());
  on_begin(prompt);
  emulate_slowdown(t0);
  stats_.prefill_ms += ms_since(t0);
}

void Drafter::emulate_slowdown(SteadyClock::time_point t0, const std::function<bool()>& stop) const {
  if (params_.slowdown <= 1) return;
  const auto until = t0 + std::chrono::duration_cast<SteadyClock::duration>((SteadyClock::now() - t0) * params_.slowdown);
  if (!stop) {
    std::this_thread::sleep_until(until);
    return;
  }
  // A pre-draft may be called off while the slow device would still be
  // computing: look, as the drafters do between steps.
  while (SteadyClock::now() < until && !stop())
    std::this_thread::sleep_for(std::min<SteadyClock::duration>(std::chrono::milliseconds(1), until - SteadyClock::now()));
}

DraftTree Drafter::propose(int32_t budget, const std::function<bool()>& stop) {
  const auto t0 = SteadyClock::now();
  rng_ = Rng::keyed(draft_seed(params_.sampling.seed), position_);
  DraftTree tree = on_propose(std::max(budget, 0), stop);
  emulate_slowdown(t0, stop);
  stats_.draft_ms += ms_since(t0);
  if (tree.size() > std::max(budget, 0))
    throw Error("drafter " + name() + " proposed " + std::to_string(tree.size()) + " nodes over a budget of " +
                std::to_string(budget));
  return tree;
}

void Drafter::record(const RoundOutcome& o) {
  // Counted from the tree verified, not from what was proposed: a round may
  // send less (a pre-draft cut at the context's end).
  const int32_t depth = o.tree.max_depth();
  if (static_cast<int32_t>(stats_.proposed_per_position.size()) < depth) {
    stats_.proposed_per_position.resize(depth, 0);
    stats_.accepted_per_position.resize(depth, 0);
  }
  for (int32_t d = 0; d < depth; ++d) {
    stats_.proposed_per_position[d] += 1;
    if (d < o.verdict.accepted) stats_.accepted_per_position[d] += 1;
  }
  stats_.rounds += 1;
  stats_.nodes += o.tree.size();
  stats_.accepted_nodes += o.verdict.accepted;
}

void Drafter::accept(const RoundOutcome& outcome) {
  record(outcome);
  position_ += static_cast<int64_t>(outcome.verdict.tokens.size());
  const auto t0 = SteadyClock::now();
  on_accept(outcome);
  emulate_slowdown(t0);
}

void Drafter::assign_state(const Drafter& other) {
  if (other.name() != name()) throw Error("drafter " + name() + " cannot take the state of a " + other.name() + " drafter");
  params_ = other.params_;
  position_ = other.position_;
  rng_ = other.rng_;
  on_assign(other);
}

void Drafter::swap_state(Drafter& other) {
  if (other.name() != name()) throw Error("drafter " + name() + " cannot swap state with a " + other.name() + " drafter");
  std::swap(params_, other.params_);
  std::swap(position_, other.position_);
  std::swap(rng_, other.rng_);
  on_swap(other);
}

std::unique_ptr<Drafter> Drafter::fork() const { throw Error("drafter " + name() + " cannot fork"); }

void Drafter::on_assign(const Drafter&) { throw Error("drafter " + name() + " cannot fork"); }
void Drafter::on_swap(Drafter&) { throw Error("drafter " + name() + " cannot fork"); }

}  // namespace splitspec

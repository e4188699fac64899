#include "client/round_loop.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "common/util/error.h"
#include "common/util/stopwatch.h"

namespace splitspec {

namespace {

// Runs `f` on scope exit unless released: what an exception must undo.
template <class F>
struct OnExit {
  F f;
  bool armed = true;
  ~OnExit() {
    if (armed) f();
  }
};
template <class F>
OnExit(F) -> OnExit<F>;

}  // namespace

RoundLoopResult run_round_loop(Drafter& drafter, Verifier& verifier, const std::vector<int32_t>& prompt,
                               const RoundLoopOptions& o, const std::function<bool(int32_t)>& on_token) {
  const auto t0 = SteadyClock::now();
  if (o.predraft && !verifier.early_verdicts())
    throw Error("pre-drafting needs early verdicts, which the " + verifier.name() + " verifier does not stream");
  std::unique_ptr<PreDrafter> pre;
  Verifier::EarlyHandler on_early;
  if (o.predraft) {
    pre = std::make_unique<PreDrafter>(
        o.predraft_threads, o.predraft_queue, [&verifier](int64_t length) { return verifier.budget(length); },
        o.generate.sampling.seed);
    on_early = [p = pre.get()](const PredictedVerdict& v) { p->push(v); };
  }
  verifier.begin(prompt, o.generate, drafter.wants(), o.deadline, on_early);
  OnExit give_up{[&] {
    if (pre) pre->stop();
    verifier.abort();
  }};
  // Declared after give_up, so ended first: no interrupt reaches an aborted verifier.
  const Cancellation::Scope interrupt(o.cancel, [&verifier] { verifier.interrupt(); });
  const auto cancelled = [&] { return o.cancel && o.cancel->requested(); };

  RoundLoopResult out;
  Stats& s = out.stats;
  int64_t first_round_tokens = 0;
  if (verifier.finished()) {
    out.finish = FinishReason::kLength;  // max_new_tokens 0
    give_up.armed = false;
    verifier.end();
    s.wall_ms = s.decode_ms = ms_since(t0);
    return out;
  }
  drafter.begin(prompt, DraftParams{{o.speculative}, o.generate.sampling, o.draft_slowdown});
  if (pre && !drafter.can_fork())
    throw Error("pre-drafting needs a drafter that can fork; " + drafter.name() + " cannot");

  int64_t length = static_cast<int64_t>(prompt.size());
  uint32_t round = 0;
  std::optional<DraftTree> predrafted;              // the next round's tree, from the pre-draft cache
  std::optional<SteadyClock::time_point> final_at;  // when the last verdict arrived
  std::optional<SteadyClock::time_point> last_sent;
  PredraftSwitch::Choice last_choice;
  int64_t last_tokens = 0;
  PredraftStats sends;  // predraft_rounds and the sends after hits and misses
  const std::function<bool()> spare = verifier.spare_compute();
  while (true) {
    if (cancelled()) {
      out.finish = FinishReason::kCancelled;
      break;
    }
    if (SteadyClock::now() > o.deadline)
      throw Error("the request's deadline passed after " + std::to_string(out.ids.size()) +
                  " tokens (DEADLINE_EXCEEDED)");
    const int32_t budget = verifier.budget(length);
    DraftTree tree = predrafted ? std::move(*predrafted) : drafter.propose(budget);
    // A pre-draft fits by construction; the drafter counts what is sent.
    tree.truncate(budget);
    const bool hit = predrafted.has_value();
    predrafted.reset();
    // Without the switch every pre-drafting round pre-drafts and none is a sample.
    PredraftSwitch::Choice choice{pre != nullptr, false};
    if (pre && o.predraft_switch) choice = o.predraft_switch->next();
    // Before the send: early verdicts of this round may arrive at once.
    ++round;
    if (choice.use) pre->begin_round(round, drafter, tree, length);
    const auto sent = SteadyClock::now();
    if (last_sent && o.predraft_switch) o.predraft_switch->observe(last_choice, ms_between(*last_sent, sent), last_tokens);
    last_sent = sent;
    last_choice = choice;
    if (choice.use) sends.predraft_rounds += 1;
    if (final_at && pre) {
      (hit ? sends.hit_send_total_ms : sends.miss_send_total_ms) += ms_between(*final_at, sent);
      (hit ? sends.hit_sends : sends.miss_sends) += 1;
    }

    // A drafter that drafts on spare compute writes its own state, which
    // pre-draft workers fork from: they let go of it first.
    if (choice.use && spare)
      drafter.verifying([&pre, &spare] {
        if (!spare()) return false;
        pre->release_main();
        return true;
      });
    else
      drafter.verifying(spare);
    RoundResult r;
    try {
      r = verifier.verify(tree, choice.use);
    } catch (...) {
      // The drafter's work ends before the verifier's error goes on; that
      // error is the one reported, not one the drafter's work also ran into.
      try {
        drafter.verified();
      } catch (...) {
      }
      if (!cancelled()) throw;
      out.finish = FinishReason::kCancelled;
      break;
    }
    drafter.verified();  // its own error, if any, ends the generation from here
    const std::optional<SteadyClock::time_point> previous = final_at;
    final_at = SteadyClock::now();
    if (previous && !r.verdict.tokens.empty())
      s.token_ms.insert(s.token_ms.end(), r.verdict.tokens.size(),
                        ms_between(*previous, *final_at) / static_cast<double>(r.verdict.tokens.size()));
    s.rounds += 1;
    s.drafted_tokens += tree.size();
    s.accepted_tokens += r.verdict.accepted;
    if (!tree.is_chain()) s.branched_trees += 1;
    if (s.rounds == 1) {
      s.first_token_ms = ms_between(t0, *final_at);
      s.prefill_ms = r.forward_ms;
      first_round_tokens = static_cast<int64_t>(r.verdict.tokens.size());
    }
    const bool finished = r.finish != FinishReason::kNone;
    last_tokens = static_cast<int64_t>(r.verdict.tokens.size());
    const RoundOutcome outcome{tree, r.verdict, r.extras};
    if (choice.use && !finished) predrafted = pre->take(outcome, drafter);
    // The last round has no next one to pre-draft; its workers may still be
    // forking the drafter, which must not change under them (found by ASan).
    else if (choice.use) pre->stop();
    if (!predrafted) drafter.accept(outcome);
    bool stop = false;
    for (int32_t id : r.verdict.tokens) {
      out.ids.push_back(id);
      if (on_token && !on_token(id)) {
        stop = true;
        break;
      }
    }
    length += static_cast<int64_t>(r.verdict.tokens.size());
    if (finished || stop) {
      out.finish = stop ? FinishReason::kCancelled : r.finish;
      break;
    }
  }
  if (pre) {
    pre->stop();
    static_cast<PredraftStats&>(s) = pre->stats();
    s.predraft_rounds = sends.predraft_rounds;
    s.hit_sends = sends.hit_sends;
    s.miss_sends = sends.miss_sends;
    s.hit_send_total_ms = sends.hit_send_total_ms;
    s.miss_send_total_ms = sends.miss_send_total_ms;
  }
  // Cancelled: give_up aborts, freeing a server's session at once. A cancel
  // that came after the last verdict leaves the result as it is, but its
  // interrupt may have ended the call too, which end() would take for an error.
  if (out.finish != FinishReason::kCancelled && !cancelled()) {
    give_up.armed = false;
    verifier.end();
  }
  s.wall_ms = ms_since(t0);
  s.decode_ms = s.wall_ms - s.first_token_ms;
  s.decode_tokens = std::max<int64_t>(0, static_cast<int64_t>(out.ids.size()) - first_round_tokens);
  return out;
}

}  // namespace splitspec

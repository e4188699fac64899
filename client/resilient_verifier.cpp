#include "client/resilient_verifier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "client/stats_sum.h"
#include "common/util/stopwatch.h"

namespace splitspec {

namespace {

void add(VerifierStats& into, const VerifierStats& s) {
  add_part(static_cast<TargetStats&>(into), s);
  add_part(static_cast<LinkStats&>(into), s);
}

}  // namespace

ResilientVerifier::ResilientVerifier(ServerLink& link, std::unique_ptr<ServerVerifier> server,
                                     std::unique_ptr<Verifier> fallback, std::chrono::milliseconds reconnect_budget,
                                     std::chrono::milliseconds failback_interval)
    : link_(link),
      server_(std::move(server)),
      fallback_(std::move(fallback)),
      reconnect_budget_(reconnect_budget),
      failback_interval_(failback_interval),
      active_(server_.get()) {}

ResilientVerifier::~ResilientVerifier() { stop_watch(); }

void ResilientVerifier::begin(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                              const ExtrasRequest& extras, std::chrono::steady_clock::time_point deadline,
                              EarlyHandler on_early) {
  stop_watch();
  prompt_ = prompt;
  generated_.clear();
  options_ = options;
  extras_ = extras;
  deadline_ = deadline;
  on_early_ = std::move(on_early);
  interrupted_ = false;
  reconnector_.start(window(), deadline);
  faults_ = FaultStats{};
  banked_ = VerifierStats{};
  active_ = server_.get();
  fallback_used_ = false;
  failing_back_ = false;
  pace_ = {};
  for_deadline_ = false;
  if (!link_.confirmed()) {
    // An offline start: the server has not been reached since connect. Asked
    // once, briefly; otherwise the fallback starts the generation and the
    // health watch brings it to the server.
    try {
      link_.check_same_target(failback_interval_);
    } catch (const Error& e) {
      spdlog::info("server {}: starting on the fallback target: {}", link_.address(), e.what());
      faults_.offline_starts = 1;
      restart_on(*fallback_, false);
      active_ = fallback_.get();
      start_watch();
      return;
    }
  }
  server_->begin(prompt, options, extras, deadline, on_early_);
}

int32_t ResilientVerifier::budget(int64_t length) const {
  const int32_t b = server_->budget(length);
  return fallback_ ? std::min(b, fallback_->budget(length)) : b;
}

void ResilientVerifier::bank(const Verifier& v) { add(banked_, v.stats()); }

void ResilientVerifier::restart_on(Verifier& v, bool early) {
  std::vector<int32_t> committed = prompt_;
  committed.insert(committed.end(), generated_.begin(), generated_.end());
  GenerateOptions left = options_;
  left.max_new_tokens -= static_cast<int32_t>(generated_.size());
  // A restarted server must still be the one whose tokens these are.
  if (&v == server_.get()) link_.check_same_target(std::chrono::milliseconds(5000));
  if (&v == server_.get() || fallback_used_) bank(v);  // begin() starts its counters afresh
  if (&v == fallback_.get()) fallback_used_ = true;
  EarlyHandler handler;
  if (early && on_early_) {
    // A new session numbers its rounds from 1; the pre-drafter counts on.
    const auto before = static_cast<uint32_t>(faults_.server_rounds + faults_.fallback_rounds);
    handler = [this, before](const PredictedVerdict& p) {
      PredictedVerdict q = p;
      q.round += before;
      on_early_(q);
    };
  }
  v.begin(committed, left, extras_, deadline_, handler);
}

bool ResilientVerifier::reconnect() {
  // With a fallback, a server that refuses connections is not waited for.
  if (!reconnector_.reconnect(fallback_ != nullptr, [this] { return interrupted_.load(); }) || interrupted_)
    return false;
  restart_on(*server_, true);
  return true;
}

void ResilientVerifier::to_fallback() {
  server_->abort();
  restart_on(*fallback_, false);
  active_ = fallback_.get();
  faults_.failovers += 1;
  spdlog::warn("server {} unreachable: verifying locally from token {}", link_.address(), generated_.size());
  start_watch();
}

void ResilientVerifier::to_server_if_serving() {
  if (!serving_) return;
  stop_watch();
  try {
    restart_on(*server_, true);
  } catch (const Error& e) {
    // A server that refuses the generation (a different target now): stay here.
    spdlog::warn("server {}: staying local: {}", link_.address(), e.what());
    start_watch(true);
    return;
  }
  active_ = server_.get();
  failing_back_ = true;  // counted once the server has verified a round
  spdlog::info("server {} serving again: verifying there from token {}", link_.address(), generated_.size());
}

bool ResilientVerifier::server_would_miss_deadline() const {
  // Two rounds at least, and the first (the prompt's prefill) left out.
  if (!fallback_ || pace_.server_rounds < 3) return false;
  const double round_ms = pace_.server_ms / static_cast<double>(pace_.server_rounds - 1);
  const double tokens_per_round =
      static_cast<double>(pace_.server_tokens) / static_cast<double>(pace_.server_rounds - 1);
  const auto left = static_cast<double>(options_.max_new_tokens - static_cast<int64_t>(generated_.size()));
  if (left <= 0 || tokens_per_round <= 0) return false;
  const double needed_ms = std::ceil(left / tokens_per_round) * round_ms;
  const double remaining_ms =
      std::chrono::duration<double, std::milli>(deadline_ - std::chrono::steady_clock::now()).count();
  return needed_ms > remaining_ms;
}

RoundResult ResilientVerifier::verify(const DraftTree& tree, bool early) {
  if (active_ == fallback_.get() && !for_deadline_) to_server_if_serving();
  if (active_ == server_.get() && !failing_back_ && server_would_miss_deadline()) {
    // The server answers, but at its measured pace the rest of the
    // generation would end after the deadline; the fallback verifies here,
    // without the round trip, and the generation stays with it.
    spdlog::warn("server {}: {} rounds at {:.1f} ms would miss the deadline; verifying locally from token {}",
                 link_.address(), pace_.server_rounds, pace_.server_ms / static_cast<double>(pace_.server_rounds),
                 generated_.size());
    server_->abort();
    restart_on(*fallback_, false);
    active_ = fallback_.get();
    for_deadline_ = true;
    faults_.failovers += 1;
    faults_.deadline_failovers += 1;
  }
  bool reopened = false;  // a session opened again for this round
  RoundResult r;
  while (true) {
    if (active_ == fallback_.get()) {
      r = fallback_->verify(tree, false);
      faults_.fallback_rounds += 1;
      break;
    }
    try {
      const auto sent = std::chrono::steady_clock::now();
      r = server_->verify(tree, early);
      faults_.server_rounds += 1;
      if (!reopened && !failing_back_) {
        pace_.server_rounds += 1;
        if (pace_.server_rounds > 1) {
          pace_.server_ms += ms_since(sent);
          pace_.server_tokens += static_cast<int64_t>(r.verdict.tokens.size());
        }
      }
      if (failing_back_) {
        failing_back_ = false;
        faults_.failbacks += 1;
        fallback_->abort();  // its KV cache is not needed until the next failover
      }
      if (reopened) {
        faults_.resumes += 1;
        spdlog::info("server {}: resumed after {} committed tokens", link_.address(), generated_.size());
      }
      break;
    } catch (const VerifierUnavailable& e) {
      failing_back_ = false;
      if (interrupted_) throw;
      if (reconnector_.broke()) {
        faults_.retried_rounds += 1;
        spdlog::warn("{}", e.what());
      }
      bool back = false;
      try {
        back = reconnect();
      } catch (const Error& refused) {
        // It answers again but refuses to resume (another target, no room
        // for a session, ...): the fallback, when there is one, goes on.
        if (!fallback_ || interrupted_) throw;
        spdlog::warn("server {}: cannot resume there: {}", link_.address(), refused.what());
        to_fallback();
        continue;
      }
      if (back) {
        reopened = true;
        continue;
      }
      if (!fallback_ || interrupted_)
        throw Error(std::string(e.what()) + "; gave up after a reconnect budget of " +
                    std::to_string(reconnect_budget_.count()) + " ms");
      to_fallback();
    } catch (const Error& e) {
      // The server came back but refuses this generation (another target, no
      // room for a session): the fallback, still where the generation is,
      // goes on.
      if (!failing_back_ || interrupted_) throw;
      failing_back_ = false;
      spdlog::warn("server {}: staying local: {}", link_.address(), e.what());
      server_->abort();
      active_ = fallback_.get();
      start_watch(true);
    }
  }
  if (const auto broke = reconnector_.since()) faults_.switch_ms += ms_since(*broke);
  reconnector_.answered();
  generated_.insert(generated_.end(), r.verdict.tokens.begin(), r.verdict.tokens.end());
  return r;
}

void ResilientVerifier::end() {
  stop_watch();
  Verifier* active = active_;
  if (active != server_.get()) server_->abort();
  try {
    active->end();
  } catch (const Error& e) {
    // Every round's verdict is in: a stream lost after the last one leaves
    // the generation whole.
    spdlog::warn("{}; the generation had finished", e.what());
  }
  // The fallback's KV cache is not needed past the generation.
  if (active == fallback_.get()) fallback_->abort();
}

void ResilientVerifier::abort() {
  stop_watch();
  server_->abort();
  if (fallback_) fallback_->abort();
}

void ResilientVerifier::interrupt() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    interrupted_ = true;
  }
  watch_cv_.notify_all();
  server_->interrupt();
}

std::function<bool()> ResilientVerifier::spare_compute() const {
  if (!fallback_) return {};
  std::function<bool()> local = fallback_->spare_compute();
  if (!local) return {};
  // Asked from the drafter's thread while this one verifies.
  return [this, local] { return active_.load() == fallback_.get() && local(); };
}

VerifierStats ResilientVerifier::stats() const {
  VerifierStats s = banked_;
  add(s, server_->stats());
  if (fallback_used_) add(s, fallback_->stats());
  return s;
}

void ResilientVerifier::start_watch(bool wait_first) {
  stop_watch();
  serving_ = false;
  watch_stop_ = false;
  watch_ = std::thread([this, wait_first] {
    std::unique_lock<std::mutex> lock(watch_mu_);
    if (wait_first) watch_cv_.wait_for(lock, failback_interval_, [&] { return watch_stop_; });
    while (!watch_stop_) {
      lock.unlock();
      const bool up = link_.serving(failback_interval_);
      lock.lock();
      if (up) {
        serving_ = true;
        return;
      }
      watch_cv_.wait_for(lock, failback_interval_, [&] { return watch_stop_; });
    }
  });
}

void ResilientVerifier::stop_watch() {
  if (!watch_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  watch_.join();
}

}  // namespace splitspec

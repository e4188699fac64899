#include "client/predraft.h"

#include <algorithm>

#include "common/kernels/threads.h"
#include "common/util/error.h"
#include "common/util/stopwatch.h"

namespace splitspec {

QueuePolicy parse_queue_policy(const std::string& name) {
  if (name == "priority") return QueuePolicy::kPriority;
  if (name == "fifo") return QueuePolicy::kFifo;
  if (name == "random") return QueuePolicy::kRandom;
  throw Error("unknown queue policy '" + name + "' (priority, fifo or random)");
}

PreDrafter::PreDrafter(int workers, QueuePolicy policy, std::function<int32_t(int64_t)> budget, uint64_t seed)
    : policy_(policy), budget_(std::move(budget)), pick_(seed) {
  if (workers < 1) throw Error("pre-draft threads must be at least 1");
  for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w] { run(w); });
}

PreDrafter::~PreDrafter() {
  stop();
  for (std::thread& t : threads_) t.join();
}

void PreDrafter::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    accepting_ = false;
    epoch_ += 1;
    winner_.reset();
  }
  cv_.notify_all();
  done_cv_.notify_all();
  // No worker reads the caller's drafter after this returns.
  std::unique_lock<std::shared_mutex> m(main_mu_);
  main_ = nullptr;
  main_round_ = 0;
}

size_t PreDrafter::take_slot() {
  if (free_slots_.empty()) {
    slots_.emplace_back();
    return slots_.size() - 1;
  }
  const size_t s = free_slots_.back();
  free_slots_.pop_back();
  return s;
}

void PreDrafter::clear_round() {
  queue_.clear();
  // Slots of running pre-drafts come back when their worker lets go.
  for (auto& [key, e] : cache_)
    if (e.done) free_slots_.push_back(e.slot);
  cache_.clear();
}

void PreDrafter::begin_round(uint32_t round, const Drafter& main, const DraftTree& tree, int64_t length) {
  // Workers need the tree's shape, not its q.
  auto shape = std::make_shared<DraftTree>();
  shape->tokens = tree.tokens;
  shape->parents = tree.parents;
  {
    std::unique_lock<std::shared_mutex> m(main_mu_);
    main_ = &main;
    main_round_ = round;
  }
  released_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  round_ = round;
  length_ = length;
  tree_ = std::move(shape);
  accepting_ = true;
  clear_round();
}

void PreDrafter::push(const PredictedVerdict& v) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (v.round != round_ || stopping_ || !accepting_) return;
    stats_.early_verdicts += 1;
    queue_.push_back(Job{v.verdict, v.confidence, v.exit_layer, arrivals_++, VerdictExtras{{}, v.hidden}});
  }
  cv_.notify_one();
}

bool PreDrafter::pop(Job& job) {
  while (!queue_.empty()) {
    size_t best = 0;
    if (policy_ == QueuePolicy::kRandom) {
      best = std::uniform_int_distribution<size_t>(0, queue_.size() - 1)(pick_);
    } else {
      for (size_t i = 1; i < queue_.size(); ++i) {
        const bool better = policy_ == QueuePolicy::kPriority ? queue_[i].confidence > queue_[best].confidence
                                                              : queue_[i].arrival < queue_[best].arrival;
        if (better) best = i;
      }
    }
    job = std::move(queue_[best]);
    queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(best));
    if (!cache_.count(key_of(job.verdict))) return true;  // already pre-drafted or running: skip
  }
  return false;
}

void PreDrafter::run(int) {
  set_compute_threads(1);
  while (true) {
    Job job;
    uint64_t epoch = 0;
    uint32_t round = 0;
    int64_t length = 0;
    size_t slot = 0;
    std::shared_ptr<const DraftTree> sent;
    Drafter* fork = nullptr;
    std::unique_ptr<Drafter> made;
    bool forked = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      if (!pop(job)) continue;
      epoch = epoch_;
      round = round_;
      length = length_;
      sent = tree_;
      slot = take_slot();
      fork = slots_[slot].get();  // slots_ may grow under mu_; a fork itself never moves
      cache_[key_of(job.verdict)] = Entry{false, slot, job.exit_layer, {}};
      stats_.predrafts += 1;
    }
    const Key key = key_of(job.verdict);
    // Stale once the round's final verdict is in, unless this is the winner.
    auto stale = [&] { return stopping_ || (epoch_ != epoch && winner_ != key); };
    const auto is_stale = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return stale();
    };
    DraftTree tree;
    bool complete = false;
    const auto t0 = SteadyClock::now();
    try {
      {
        std::shared_lock<std::shared_mutex> m(main_mu_);
        if (main_ != nullptr && main_round_ == round) {
          if (fork == nullptr) {
            made = main_->fork();
            fork = made.get();
          } else {
            fork->assign_state(*main_);
          }
          forked = true;
        }
      }
      if (made) {
        std::lock_guard<std::mutex> lock(mu_);
        slots_[slot] = std::move(made);
      }
      if (forked) {
        // Early verdicts carry no top K; an exit's hidden state stands in for the target's.
        fork->accept(RoundOutcome{*sent, job.verdict, job.extras});
        tree = fork->propose(budget_(length + static_cast<int64_t>(job.verdict.tokens.size())), is_stale);
        complete = !is_stale();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      complete = false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.predraft_ms += ms_since(t0);
      auto it = cache_.find(key);
      const bool mine = it != cache_.end() && it->second.slot == slot && !it->second.done;
      // A draft cut short by a stop is not what the drafter would propose.
      if (!complete || stale() || !mine) {
        if (mine) cache_.erase(it);
        free_slots_.push_back(slot);
      } else {
        it->second.done = true;
        it->second.tree = std::move(tree);
      }
    }
    done_cv_.notify_all();
  }
}

void PreDrafter::release_main() {
  if (released_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
    queue_.clear();
  }
  // Waits out a fork in flight; a job popped but not forked finds no main.
  std::unique_lock<std::shared_mutex> m(main_mu_);
  main_ = nullptr;
}

std::optional<DraftTree> PreDrafter::take(const RoundOutcome& outcome, Drafter& main) {
  const Key key = key_of(outcome.verdict);
  std::unique_lock<std::mutex> lock(mu_);
  stats_.predraft_lookups += 1;
  epoch_ += 1;
  winner_ = key;
  accepting_ = false;
  queue_.clear();
  std::optional<DraftTree> out;
  size_t slot = 0;
  Drafter* state = nullptr;
  auto it = cache_.find(key);
  std::optional<double> waited_ms;
  if (it != cache_.end() && !it->second.done) {
    // Already being drafted: finishing it beats starting over.
    const auto t0 = SteadyClock::now();
    done_cv_.wait(lock, [&] {
      auto i = cache_.find(key);
      return stopping_ || i == cache_.end() || i->second.done;
    });
    waited_ms = ms_since(t0);
    it = cache_.find(key);
  }
  if (it != cache_.end() && it->second.done) {
    out = std::move(it->second.tree);
    slot = it->second.slot;
    state = slots_[slot].get();
    stats_.predraft_hits += 1;
    stats_.exit_layer_sum += it->second.exit_layer;
    if (waited_ms) {
      stats_.predraft_waited_hits += 1;
      stats_.sync_wait_ms += *waited_ms;
    }
    cache_.erase(it);
  }
  clear_round();
  winner_.reset();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  lock.unlock();
  // Workers fork from main only under the shared lock: with it held
  // exclusively, main is ours to change.
  {
    std::unique_lock<std::shared_mutex> m(main_mu_);
    main_ = nullptr;
    if (out) {
      main.record(outcome);
      main.swap_state(*state);
    }
  }
  if (out) {
    // The slot now holds main's old state, free to be overwritten.
    std::lock_guard<std::mutex> relock(mu_);
    free_slots_.push_back(slot);
  }
  return out;
}

}  // namespace splitspec

#include "client/predraft.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "common/util/error.h"
#include "common/util/stopwatch.h"
#include "common/engine/threads.h"

namespace splitspec {

QueuePolicy parse_queue_policy(const std::string& name) {
  if (name == "priority") return QueuePolicy::kPriority;
  if (name == "fifo") return QueuePolicy::kFifo;
  if (name == "random") return QueuePolicy::kRandom;
  throw Error("unknown queue policy '" + name + "' (priority, fifo or random)");
}

PreDrafter::PreDrafter(const Model& draft, int workers, QueuePolicy policy, int32_t gamma, const SamplingParams& params,
                       uint64_t seed)
    : draft_(draft), policy_(policy), gamma_(gamma), params_(params), seed_(seed), pick_(seed) {
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
    winner_.clear();
  }
  cv_.notify_all();
  done_cv_.notify_all();
  // No worker reads the caller's drafter after this returns.
  std::unique_lock<std::shared_mutex> m(main_mu_);
  main_ = nullptr;
}

size_t PreDrafter::take_slot() {
  if (free_slots_.empty()) {
    slots_.push_back(std::make_unique<ModelDrafter>(draft_));
    return slots_.size() - 1;
  }
  const size_t s = free_slots_.back();
  free_slots_.pop_back();
  return s;
}

void PreDrafter::clear_round() {
  queue_.clear();
  // Slots of running pre-drafts come back when their worker lets go.
  for (auto& [tokens, e] : cache_)
    if (e.done) free_slots_.push_back(e.slot);
  cache_.clear();
}

void PreDrafter::begin_round(uint32_t round, const ModelDrafter& main) {
  {
    std::unique_lock<std::shared_mutex> m(main_mu_);
    main_ = &main;
  }
  std::lock_guard<std::mutex> lock(mu_);
  round_ = round;
  accepting_ = true;
  clear_round();
}

void PreDrafter::push(uint32_t round, std::vector<int32_t> tokens, int32_t accepted, double confidence, int32_t exit_layer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (round != round_ || stopping_ || !accepting_) return;
    stats_.early_verdicts += 1;
    queue_.push_back(Job{std::move(tokens), accepted, confidence, exit_layer, arrivals_++});
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
    if (!cache_.count(job.tokens)) return true;  // already pre-drafted or running: skip
  }
  return false;
}

void PreDrafter::run(int worker) {
  set_compute_threads(1);
  c10::InferenceMode guard;
  while (true) {
    Job job;
    uint64_t epoch = 0;
    uint32_t round = 0;
    size_t slot = 0;
    ModelDrafter* d_ptr = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      if (!pop(job)) continue;
      epoch = epoch_;
      round = round_;
      slot = take_slot();
      d_ptr = slots_[slot].get();  // slots_ may grow under mu_; the drafter itself never moves
      cache_[job.tokens] = Entry{false, slot, job.exit_layer, {}};
      stats_.predrafts += 1;
    }
    ModelDrafter& d = *d_ptr;
    bool forked = false;
    {
      std::shared_lock<std::shared_mutex> m(main_mu_);
      if (main_ != nullptr) {
        d.fork_after(*main_, job.tokens, job.accepted);
        forked = true;
      }
    }
    // Stale once the round's final verdict is in, unless this is the winner.
    auto stale = [&] { return stopping_ || (epoch_ != epoch && winner_ != job.tokens); };
    DraftTree tree;
    const auto t0 = SteadyClock::now();
    if (forked) {
      Rng rng(draft_seed(seed_) ^ (static_cast<uint64_t>(round) * 0x100000001b3ull + job.arrival * 0x9e37ull + 1));
      tree = d.draft(gamma_, params_, rng, [&] {
        std::lock_guard<std::mutex> lock(mu_);
        return stale();
      });
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.predraft_ms += ms_since(t0);
      auto it = cache_.find(job.tokens);
      const bool mine = it != cache_.end() && it->second.slot == slot && !it->second.done;
      if (!forked || stale() || tree.size() < gamma_ || !mine) {
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

std::optional<DraftTree> PreDrafter::take(const std::vector<int32_t>& tokens, int32_t accepted, ModelDrafter& main) {
  std::unique_lock<std::mutex> lock(mu_);
  stats_.rounds += 1;
  epoch_ += 1;
  winner_ = tokens;
  accepting_ = false;
  queue_.clear();
  std::optional<DraftTree> out;
  size_t slot = 0;
  ModelDrafter* state = nullptr;
  auto it = cache_.find(tokens);
  if (it != cache_.end() && !it->second.done) {
    // Already being drafted: finishing it beats starting over.
    const auto t0 = SteadyClock::now();
    done_cv_.wait(lock, [&] {
      auto i = cache_.find(tokens);
      return stopping_ || i == cache_.end() || i->second.done;
    });
    stats_.waited_hits += 1;
    stats_.wait_ms += ms_since(t0);
    it = cache_.find(tokens);
  }
  if (it != cache_.end() && it->second.done) {
    out = std::move(it->second.tree);
    slot = it->second.slot;
    state = slots_[slot].get();
    stats_.hits += 1;
    stats_.exit_layer_sum += it->second.exit_layer;
    cache_.erase(it);
  } else if (it != cache_.end() && !it->second.done) {
    stats_.waited_hits -= 1;  // stopped without finishing: a miss after all
  }
  clear_round();
  winner_.clear();
  lock.unlock();
  // Workers fork from main only under the shared lock: with it held
  // exclusively, main is ours to change.
  {
    std::unique_lock<std::shared_mutex> m(main_mu_);
    main_ = nullptr;
    if (out) {
      main.record(accepted);
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

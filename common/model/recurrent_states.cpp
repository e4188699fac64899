#include "common/model/recurrent_states.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include "common/util/error.h"

namespace splitspec {

RecurrentStates::RecurrentStates(int64_t floats, int64_t window) : floats_(floats), window_(window) {
  if (window < 1) throw Error("recurrent state window " + std::to_string(window) + " must be at least 1");
  kept_[0].assign(static_cast<size_t>(floats), 0.0f);  // before any entry: zeros
}

size_t RecurrentStates::bytes() const {
  return (kept_.size() + saved_.size() + pool_.size()) * static_cast<size_t>(floats_) * sizeof(float);
}

std::vector<float> RecurrentStates::take() {
  if (pool_.empty()) return std::vector<float>(static_cast<size_t>(floats_));
  std::vector<float> v = std::move(pool_.back());
  pool_.pop_back();
  return v;
}

void RecurrentStates::give(std::vector<float> v) {
  if (static_cast<int64_t>(pool_.size()) < window_) pool_.push_back(std::move(v));
}

const float* RecurrentStates::find(int64_t t) const {
  if (auto it = saved_.find(t); it != saved_.end()) return it->second.data();
  if (auto it = kept_.find(t); it != kept_.end()) return it->second.data();
  return nullptr;
}

void RecurrentStates::begin(int64_t past) {
  for (auto& [t, v] : saved_) give(std::move(v));
  saved_.clear();
  past_ = past;
}

float* RecurrentStates::save(int64_t t) {
  auto [it, fresh] = saved_.try_emplace(t);
  if (fresh) it->second = take();
  return it->second.data();
}

void RecurrentStates::commit(int64_t size) {
  for (auto& [t, v] : saved_) {
    auto [it, fresh] = kept_.try_emplace(t);
    if (!fresh) give(std::move(it->second));
    it->second = std::move(v);
  }
  saved_.clear();
  // The state before the forward stays too: a verification rejected at its
  // first row rolls back to it.
  const int64_t oldest = std::min(past_, size - window_);
  while (!kept_.empty() && kept_.begin()->first < oldest) {
    give(std::move(kept_.begin()->second));
    kept_.erase(kept_.begin());
  }
}

namespace {

Error not_kept(int64_t n, int64_t window) {
  return Error("recurrent state: the state after " + std::to_string(n) +
               " entries is not kept (a delta-rule model rolls back at most " + std::to_string(window) +
               " entries, or to a row its last forward kept)");
}

}  // namespace

void RecurrentStates::truncate(int64_t n) {
  if (!has(n)) throw not_kept(n, window_);
  while (!kept_.empty() && kept_.rbegin()->first > n) {
    give(std::move(kept_.rbegin()->second));
    kept_.erase(std::prev(kept_.end()));
  }
}

void RecurrentStates::keep(int64_t base, const std::vector<int64_t>& rows) {
  const int64_t last = rows.empty() ? base : base + rows.back() + 1;
  if (!has(last)) throw not_kept(last, window_);
  std::map<int64_t, std::vector<float>> moved;
  for (size_t i = 0; i < rows.size(); ++i)
    if (auto it = kept_.find(base + rows[i] + 1); it != kept_.end())
      moved[base + static_cast<int64_t>(i) + 1] = std::move(it->second);
  while (!kept_.empty() && kept_.rbegin()->first > base) {
    if (!kept_.rbegin()->second.empty()) give(std::move(kept_.rbegin()->second));
    kept_.erase(std::prev(kept_.end()));
  }
  kept_.merge(moved);
}

RecurrentStates RecurrentStates::copy_at(int64_t n) const {
  if (!has(n)) throw not_kept(n, window_);
  RecurrentStates out;
  out.floats_ = floats_;
  out.window_ = window_;
  out.past_ = n;
  out.kept_[n] = kept_.at(n);
  return out;
}

}  // namespace splitspec

#include "common/kernels/thread_choice.h"

#include <algorithm>
#include <cmath>

#include "common/kernels/parallel.h"

namespace splitspec::kernels {

double ThreadChoice::Times::median() const {
  std::array<double, kKept> s = t;
  std::nth_element(s.begin(), s.begin() + count / 2, s.begin() + count);
  return s[count / 2];
}

int ThreadChoice::every(double a, double b) {
  const double gap = std::abs(a - b) / std::max(std::min(a, b), 1e-12);
  return static_cast<int>(std::clamp(gap / kTryCost, double{kMinEvery}, double{kMaxEvery}));
}

ThreadChoice::Pick ThreadChoice::pick(int64_t rows, int wanted, Clock::time_point now) {
  if (wanted <= 1 || !threads_timed()) return {wanted, -1, 0};
  int bucket = 0;
  for (int64_t r = rows; r > 1 && bucket + 1 < static_cast<int>(sizes_.size()); r >>= 1) ++bucket;
  std::lock_guard<std::mutex> lock(mutex_);
  Size& s = sizes_[bucket];
  const Times &many = s.options[0], &one = s.options[1];
  int option;
  if (many.count < kFirst || one.count < kFirst) {
    option = one.count < many.count ? 1 : 0;
  } else {
    const double a = many.median(), b = one.median();
    const int best = a < (1 - kMargin) * b ? 0 : 1;
    option = ++s.since_other >= every(a, b) && now - s.last_try >= kTryGap ? 1 - best : best;
    if (option != best) {
      s.since_other = 0;
      s.last_try = now;
    }
  }
  return {option == 0 ? wanted : 1, option, bucket};
}

void ThreadChoice::record(const Pick& p, double seconds) {
  if (p.option < 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Times& t = sizes_[p.bucket].options[p.option];
  t.t[t.next] = seconds;
  t.next = (t.next + 1) % kKept;
  t.count = std::min(t.count + 1, kKept);
}

}  // namespace splitspec::kernels

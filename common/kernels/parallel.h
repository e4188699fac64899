#pragma once
// How the kernels split work over the compute threads. Free of LibTorch.
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace splitspec::kernels {

// The compute thread count the kernels use on the calling thread
// (set_compute_threads sets it); a thread that never set one gets the first
// count set in the process.
void set_threads(int n);
int threads();

// The threads worth giving a forward of `macs` multiply-adds: one for each
// kMacsPerThread of it, at most threads(). A smaller share (about 0.15 ms of
// work) is worth less than the forward's hand-offs: a forward is some twenty
// parallel regions, each a wake-up and a barrier, and beside another busy
// process each barrier waits for a partner the scheduler preempted (the
// demo draft's step: 0.10 ms on 1 thread, 0.79 ms on 2 beside a server).
constexpr int64_t kMacsPerThread = int64_t{3} << 20;
int threads_for(int64_t macs);

// Sets this thread's kernel thread count for a scope, then restores it.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n);
  ~ScopedThreads();
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

// Runs f(begin, end) over [0, count) in chunks of `grain`, handed out
// dynamically so that a core slowed by other work takes fewer chunks instead
// of holding the others at the barrier. Each output element is written by
// exactly one chunk, so results do not depend on how the range was split.
template <typename F>
void parallel(int64_t count, int64_t grain, const F& f) {
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = (count + grain - 1) / grain;
  const int n = static_cast<int>(std::min<int64_t>(threads(), chunks));
  if (n <= 1 || omp_in_parallel()) {
    f(0, count);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(n)
  for (int64_t c = 0; c < chunks; ++c) f(c * grain, std::min(count, (c + 1) * grain));
}

// Chunk size giving each thread about `per_thread` chunks of at least
// `min_grain` items.
inline int64_t grain_for(int64_t count, int64_t min_grain, int64_t per_thread = 8) {
  return std::max<int64_t>(min_grain, count / (per_thread * std::max(1, threads())));
}

// parallel() over [0, count) in whole blocks of `block` items (the vector
// width or a kernel's row blocking), at least `min_blocks` blocks per chunk.
// The chunks come in a multiple of the thread count, as equal as whole
// blocks allow (a kernel of a few chunks split 3 to 2 leaves a core idle for
// a fifth of it), unless there is too little work to go round.
template <typename F>
void parallel_blocks(int64_t count, int64_t block, int64_t min_blocks, const F& f) {
  if (count <= 0) return;
  const int64_t blocks = (count + block - 1) / block;
  const int64_t n = std::max(1, threads()), per = std::max<int64_t>(1, min_blocks);
  // Too little work for every thread: fewer chunks, down to running serially.
  const int64_t rounds = blocks / (n * per);
  const int64_t chunks = rounds == 0 ? std::max<int64_t>(1, blocks / per) : n * std::min<int64_t>(rounds, 8);
  parallel(chunks, 1, [&](int64_t c0, int64_t c1) {
    f(c0 * blocks / chunks * block, std::min(count, c1 * blocks / chunks * block));
  });
}

}  // namespace splitspec::kernels

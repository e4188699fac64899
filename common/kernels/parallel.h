#pragma once
// How the kernels split work over the compute threads. Free of LibTorch.
#include <algorithm>
#include <cstdint>

namespace splitspec::kernels {

// The compute thread count the kernels use on the calling thread
// (set_compute_threads sets it); a thread that never set one gets the first
// count set in the process. `timed`: the count is a default, not the user's,
// and a model's forwards may take one thread instead where that times
// faster (ThreadChoice); an explicit count is used as given.
void set_threads(int n, bool timed = false);
int threads();
bool threads_timed();

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
  bool saved_timed_;
};

// Runs fn(ctx, c) for every chunk c in [0, chunks) on the calling thread
// and up to n - 1 of its pool's workers (pool.cpp), each chunk once, and
// returns when all are done. Each thread takes its own range of chunks one
// at a time, then the others' left over, so a core slowed by other work
// takes fewer, and the caller never waits for a worker that has not begun
// one.
using ChunkFn = void (*)(const void* ctx, int64_t chunk);
void run_chunks(int64_t chunks, int n, ChunkFn fn, const void* ctx);
// Whether this thread is running chunks (a nested parallel() runs serially).
bool in_chunks();
// Whether work of n threads asked for by this thread runs alone for now, its
// pool having seen other work on the cores (pool.cpp). Each call counts the
// machine's runnable threads as a job's end does, so a caller that chose
// one thread itself keeps watching, and tries no threads while the other
// work goes on.
bool cores_shared(int n);

// Runs f(begin, end) over [0, count) in chunks of `grain` (run_chunks).
// Each output element is written by exactly one chunk, so results do not
// depend on how the range was split or which thread ran what.
template <typename F>
void parallel(int64_t count, int64_t grain, const F& f) {
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = (count + grain - 1) / grain;
  const int n = static_cast<int>(std::min<int64_t>(threads(), chunks));
  if (n <= 1 || in_chunks()) {
    f(0, count);
    return;
  }
  struct Ctx {
    const F& f;
    int64_t count, grain;
  } ctx{f, count, grain};
  run_chunks(chunks, n, [](const void* p, int64_t c) {
    const Ctx& x = *static_cast<const Ctx*>(p);
    x.f(c * x.grain, std::min(x.count, (c + 1) * x.grain));
  }, &ctx);
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

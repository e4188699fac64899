// The compute threads behind parallel() (parallel.h). Why not an OpenMP
// region, as before: its join waits for every thread of the team, so beside
// another busy process a region of a few microseconds waited for a partner
// the scheduler had preempted, for up to a time slice (the demo target's
// 5-token forward at 2 threads beside `yes`: p99 8.8-92.7 ms against 1.3-1.5
// on 1 thread). Here the caller waits only for chunks another thread has
// begun; a worker that wakes late finds none left and goes back to waiting.
// Workers spin briefly between a forward's regions, then sleep, so an idle
// pool leaves the cores to other work; while other work shares the cores
// (sharing.h) the caller runs its jobs alone.
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/kernels/parallel.h"
#include "common/kernels/sched_stats.h"
#include "common/kernels/sharing.h"

namespace splitspec::kernels {
namespace {

thread_local bool t_in_chunks = false;

// About as long as the serial work between a forward's parallel regions:
// a worker still spinning when the next region comes needs no wake-up.
constexpr auto kSpin = std::chrono::microseconds(50);
// How often a busy worker reads its own delay.
constexpr auto kDelayRead = std::chrono::milliseconds(10);
using Clock = std::chrono::steady_clock;
// Pauses a caller spins for a spinning worker's last chunk before yielding
// (a pause is 10-60 ns, by CPU).
constexpr int kSpinForChunk = 1024;
// Ranges a job is split into, at most: threads past them own none.
constexpr int kRanges = 64;

// The first chunk of range i of a job's `parts`; range i ends where i + 1
// begins.
inline int64_t range_start(int64_t chunks, int i, int parts) { return chunks * i / parts; }

inline void relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_.store(true);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void run(int64_t chunks, int n, ChunkFn fn, const void* ctx) {
    while (static_cast<int>(workers_.size()) < n - 1) {
      const int id = static_cast<int>(workers_.size());
      // Each worker is handed its slot: the caller may be adding the next.
      std::atomic<int64_t>& delay = worker_delay_.emplace_back(0);
      workers_.emplace_back([this, id, &delay] { work(id, delay); });
    }
    // Only the caller posts, so posted_ is the last job's generation.
    const uint32_t g = posted_.load(std::memory_order_relaxed) + 1;
    const int parts = std::min(n, kRanges);
    // The last job's claims close first. A worker still in its help() may
    // read this job's shape: the release below makes it see the closed
    // words too, so that it cannot claim a chunk past the last job's end,
    // which would run a chunk of this job twice and count it done once too
    // often (Pool.BackToBackJobsOfOtherSizesRunEachChunkOnce).
    for (int i = 0; i < last_parts_; ++i) ranges_[i].claim.store(uint64_t{g} << 32 | 0xffffffffu, std::memory_order_relaxed);
    last_parts_ = parts;
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    shape_.store(static_cast<uint64_t>(chunks) << 32 | static_cast<uint32_t>(parts), std::memory_order_release);
    helpers_.store(n - 1, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    for (int i = 0; i < parts; ++i)
      ranges_[i].claim.store(uint64_t{g} << 32 | static_cast<uint64_t>(range_start(chunks, i, parts)), std::memory_order_release);
    posted_.store(g);
    const bool woke = sleepers_.load() > 0;
    if (woke) {
      std::lock_guard<std::mutex> lock(mutex_);
      wake_.notify_all();
    }
    const auto start = Clock::now();
    const int64_t own = help(g, 0);
    // Only chunks another thread has begun are left: wait for them. After
    // waking a worker, yield soon: it is often woken onto the caller's own
    // core (the scheduler's wake-affine placement), and a caller that spun
    // longer (4096 pauses) held that core from the chunk it waited for: in
    // 4 of 10 idle runs the demo target's 5-token forward at 2 threads took
    // 0.62 ms, slower than 1 thread's 0.56, against 0.37 in the others. A
    // worker that was spinning is on a core of its own, and its last chunk
    // takes about as long as a yield's system call on this VM (a few
    // microseconds): spin for it first.
    const auto helped = Clock::now();
    const int spin = woke ? 64 : kSpinForChunk;
    bool waited = false;
    for (int spins = 0; done_.load(std::memory_order_acquire) < chunks - own; ++spins) {
      waited = true;
      if (spins < spin)
        relax();
      else
        std::this_thread::yield();
    }
    const auto end = Clock::now();
    if (sharing_.job(start, helped, end, waited)) sharing_.delay(end, run_delay());
    sample(end, n, true);
  }

  // At the end of a job of n threads, run with them (`threaded`) or alone.
  void sample(Clock::time_point now, int n, bool threaded) {
    if (!sharing_.sample_due(now)) return;
    const int runnable = runnable_.now();
    if (runnable < 0) return;
    // Ours: this thread and its workers. After a job the workers are
    // spinning for the next, or were woken for this one and have not yet
    // run (still counted asleep then: at idle a tenth of the samples);
    // alone, they sleep.
    const int ours = 1 + static_cast<int>(workers_.size()) - (threaded ? 0 : sleepers_.load(std::memory_order_relaxed));
    sharing_.sample(now, runnable, ours, n, runnable_.cpus());
  }

  // Whether other work shares the cores (sharing.h): until it stops, the
  // caller runs its jobs by itself. With three runnable threads on two
  // cores, whichever is preempted waits a time slice (the demo target's
  // forward: p99 4.2 ms at 2 threads beside `yes`, 0.37 at 1).
  bool alone() const { return sharing_.alone(Clock::now()); }

 private:
  // The caller's and its workers' delays summed (RunDelay).
  int64_t run_delay() const {
    int64_t sum = own_delay_.ns();
    for (const auto& d : worker_delay_) sum += d.load(std::memory_order_relaxed);
    return sum;
  }

  // Takes chunks of job g until none is left, its own range first, then
  // the others' (a worker that woke late, or whose core is taken, leaves
  // its range to the rest); returns how many it ran. A thread that claimed
  // one keeps the job alive (its caller waits for it), so fn and ctx are
  // g's. Claims from its own range touch only a cache line of its own, and
  // a worker counts its chunks done once: a chunk claimed and counted on
  // shared lines passed them between the cores twice, about a microsecond
  // here, as long as a chunk of a small model's 8-row forward.
  int64_t help(uint32_t g, int self) {
    // Read once: a later job's shape comes with claim words of its own
    // generation, which end this one below.
    const uint64_t shape = shape_.load(std::memory_order_acquire);
    const int64_t chunks = static_cast<int64_t>(shape >> 32);
    const int parts = static_cast<int>(static_cast<uint32_t>(shape));
    int64_t ran = 0;
    for (int k = 0; k < parts; ++k) {
      const int i = (self + k) % parts;
      const int64_t end = range_start(chunks, i + 1, parts);
      std::atomic<uint64_t>& claim = ranges_[i].claim;
      for (uint64_t w = claim.load(std::memory_order_acquire);;) {
        if (static_cast<uint32_t>(w >> 32) != g) return ran;  // the job is over
        const int64_t c = static_cast<int64_t>(w & 0xffffffffu);
        if (c >= end) break;
        if (!claim.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel)) continue;
        fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), c);
        ++ran;
        w = claim.load(std::memory_order_acquire);
      }
    }
    return ran;
  }

  void work(int id, std::atomic<int64_t>& published) {
    t_in_chunks = true;
    uint32_t seen = 0;
    RunDelay delay;
    published.store(delay.ns(), std::memory_order_relaxed);
    auto next_read = Clock::now();
    for (;;) {
      uint32_t g = posted_.load();
      const auto until = Clock::now() + kSpin;
      for (int spins = 0; g == seen && !stop_.load(std::memory_order_relaxed); g = posted_.load()) {
        if (++spins % 64 != 0 || Clock::now() < until) {
          relax();
          continue;
        }
        published.store(delay.ns(), std::memory_order_relaxed);
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return posted_.load() != seen || stop_.load(); });
        sleepers_.fetch_sub(1);
      }
      if (stop_.load()) return;
      seen = g;
      if (id < helpers_.load(std::memory_order_relaxed))
        if (const int64_t ran = help(g, id + 1); ran > 0) done_.fetch_add(ran, std::memory_order_release);
      if (const auto now = Clock::now(); now >= next_read) {
        published.store(delay.ns(), std::memory_order_relaxed);
        next_read = now + kDelayRead;
      }
    }
  }

  std::vector<std::thread> workers_;
  // Each counter on a cache line of its own: the spinning workers read
  // posted_ while the threads of a job update their ranges and done_.
  alignas(64) std::atomic<uint32_t> posted_{0};
  alignas(64) std::atomic<int64_t> done_{0};
  // A job's chunks are split into one range for each of its threads (up to
  // kRanges; more threads take from the others'), each range's next chunk
  // claimed on a cache line of its own.
  struct alignas(64) Range {
    std::atomic<uint64_t> claim{0};  // generation << 32 | the next chunk
  };
  Range ranges_[kRanges];
  int last_parts_ = 0;  // the ranges the last job opened (the caller's alone)
  alignas(64) std::atomic<uint64_t> shape_{0};  // chunks << 32 | ranges
  std::atomic<int> helpers_{0};
  std::atomic<ChunkFn> fn_{nullptr};
  std::atomic<const void*> ctx_{nullptr};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  RunDelay own_delay_;
  std::deque<std::atomic<int64_t>> worker_delay_;  // each worker's RunDelay, as it last read it
  Runnable runnable_;
  Sharing sharing_;
};

// Each calling thread has its own workers, as each OpenMP master thread
// had its own team: the server's compute thread and a local client's never
// wait for each other.
Pool& this_pool() {
  thread_local std::unique_ptr<Pool> pool;
  if (!pool) pool = std::make_unique<Pool>();
  return *pool;
}

}  // namespace

bool in_chunks() { return t_in_chunks; }

bool cores_shared(int n) {
  Pool& pool = this_pool();
  pool.sample(Clock::now(), n, false);
  return pool.alone();
}

void run_chunks(int64_t chunks, int n, ChunkFn fn, const void* ctx) {
  Pool& pool = this_pool();
  t_in_chunks = true;
  if (pool.alone()) {
    for (int64_t c = 0; c < chunks; ++c) fn(ctx, c);
    pool.sample(Clock::now(), n, false);
  } else {
    pool.run(chunks, n, fn, ctx);
  }
  t_in_chunks = false;
}

}  // namespace splitspec::kernels

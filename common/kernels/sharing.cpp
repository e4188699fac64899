#include "common/kernels/sharing.h"

#include <algorithm>

namespace splitspec::kernels {
namespace {

using namespace std::chrono_literals;

// A wait for another thread's chunk this long, and longer than twice the
// caller's own share, is a preemption, not a slower chunk. kPreemptions of
// them within kAlone make the caller work alone for kAlone, then try its
// workers again. Fewer are not enough: a new worker's first chunks (its
// first touch of memory) and the hypervisor's own ticks made one or two
// such waits in an idle process's first second, and a forward measured
// then ran alone at 1-thread speed.
constexpr auto kPreempted = 2ms;
constexpr auto kAlone = 500ms;
constexpr int kPreemptions = 4;
// Its threads' time runnable but waiting for a core (RunDelay), summed over
// a kSharedWindow of jobs, over kDelayPercent of the window in kDelayWindows
// windows in a row says their cores are shared with periodic work, and the
// caller works alone for kSharedAlone: on an idle Zen 5 VM the demo
// target's 2-thread forwards waited 0-2.5%, beside a 1 kHz control loop on
// one core (0.2 ms a tick) 22-23%. One window is not enough: on that VM,
// with an agent of its own waking every 50 ms, the 1B's idle windows waited
// 0.2-4.9% and about one in ten more (up to 9.4%), and half its 3 s runs at
// two threads ran alone at one thread's speed (37 ms against 19-21). The
// caller's own waits for begun chunks, the measure before this one, were
// 3-13% beside that loop, and 8-19% at idle on a VM whose cores pass a cache
// line in 500 ns: a slow partner and a preempted one look alike from the
// caller.
constexpr auto kSharedWindow = 200ms;
constexpr int64_t kDelayPercent = 5;
constexpr int kDelayWindows = 2;
// A window over kDelayPercentAtOnce is not noise: the caller goes alone at
// once, not 200 ms later, which the loop beside the demo target's first
// forwards paid for in missed deadlines.
constexpr int64_t kDelayPercentAtOnce = 15;
constexpr auto kSharedAlone = 2s;
// Every kSampleEvery at a job's end, alone or not, the caller counts the
// machine's runnable threads (Runnable) other than its own, adding the job's
// n (at most the CPUs): more than the CPUs in kOverSamples of the last
// kSamples means other work wants the cores (a busy process: every sample)
// and the caller works alone for kOverAlone, which its samples while alone
// keep extending. Counting, not waiting for a preemption to show: beside
// `yes`, with the delays and the caller's waits measured alone, one 2-thread
// forward in a hundred still waited a time slice for its preempted partner
// (the demo target's p99 2.5-4.8 ms against 0.9-1.6 on 1 thread). Half the
// samples, since at idle other threads (the kernel's) are runnable in 1-2%
// of them, in bursts.
constexpr auto kSampleEvery = 2ms;
constexpr int kSamples = 16;
constexpr int kOverSamples = 8;
constexpr auto kOverAlone = 1s;
// Periodic work (a 1 kHz control loop running 0.2 ms a tick) is runnable in
// too few samples for kOverSamples. kPeriodicOver of the last
// kPeriodicSamples taken while no worker of the caller is awake make the
// caller work alone for kSharedAlone, and so keep it alone while the loop
// runs. Without them it went back to its workers every kSharedAlone to find
// the loop again (by its delays), and those forwards were the ones that
// delayed the loop: on that VM a forward on the loop's core held back its
// timer wake-ups by up to 9.5 ms (perf: the core's timer interrupts stopped
// for as long, below the guest's scheduler; a busy Python loop there held
// them back up to 5.5 ms), and the loop missed more deadlines beside the
// default (4.2 a thousand, the 1B target) than beside one thread (2.5).
// Only while no worker is awake: with every core the caller's, any thread
// that wakes waits for one and is counted for as long, so the agent above
// was runnable in up to 20 of 128 samples beside the 50M model's 2-thread
// forwards, as often as the loop can be (13-40), and sent them alone.
constexpr int kPeriodicSamples = 128;
constexpr int kPeriodicOver = 14;

}  // namespace

bool Sharing::Tally::add(bool o, int size, int need) {
  over += o;
  if (++samples < size) return false;
  const bool hit = over >= need;
  samples = over = 0;
  return hit;
}

void Sharing::alone_for(Clock::time_point now, Clock::duration d) { alone_until_ = std::max(alone_until_, now + d); }

bool Sharing::job(Clock::time_point start, Clock::time_point helped, Clock::time_point end, bool waited) {
  if (waited && end - helped > kPreempted && end - helped > 2 * (helped - start)) {
    if (end - preempt_window_ > kAlone) {
      preempt_window_ = end;
      preemptions_ = 0;
    }
    if (++preemptions_ == kPreemptions) alone_for(end, kAlone);
  }
  // A pause between jobs (a prompt's tokenization, a network round) begins
  // a new window: what happened then is not the jobs'.
  if (start - last_end_ > kSharedWindow) {
    delay_window_ = start;
    baseline_ = true;
    delayed_windows_ = 0;
  }
  last_end_ = end;
  return baseline_ || end - delay_window_ > kSharedWindow;
}

void Sharing::delay(Clock::time_point now, int64_t ns) {
  if (!baseline_) {
    const auto window = std::chrono::duration_cast<std::chrono::nanoseconds>(now - delay_window_);
    const int64_t percent_of_window = (ns - last_delay_) * 100;
    delayed_windows_ = percent_of_window > window.count() * kDelayPercent ? delayed_windows_ + 1 : 0;
    if (delayed_windows_ >= kDelayWindows || percent_of_window > window.count() * kDelayPercentAtOnce)
      alone_for(now, kSharedAlone);
    delay_window_ = now;
  }
  baseline_ = false;
  last_delay_ = ns;
}

bool Sharing::sample_due(Clock::time_point now) {
  if (now < next_sample_) return false;
  next_sample_ = now + kSampleEvery;
  return true;
}

void Sharing::sample(Clock::time_point now, int runnable, int ours, int n, int cpus) {
  // More threads asked for than CPUs are not others'.
  const bool over = runnable - ours + std::min(n, cpus) > cpus;
  if (busy_.add(over, kSamples, kOverSamples)) alone_for(now, kOverAlone);
  if (ours == 1 && periodic_.add(over, kPeriodicSamples, kPeriodicOver)) alone_for(now, kSharedAlone);
}

}  // namespace splitspec::kernels

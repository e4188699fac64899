#include "server/compute_queue.h"

#include "common/kernels/threads.h"
#include "common/util/error.h"

namespace splitspec {

ComputeQueue::ComputeQueue(int compute_threads, BatchingOptions batching, ForwardEmulation emulation)
    : batching_(batching), emulation_(emulation), worker_([this, compute_threads] { run(compute_threads); }) {}

ComputeQueue::~ComputeQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void ComputeQueue::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(Job{std::move(job), std::nullopt});
  }
  cv_.notify_one();
}

void ComputeQueue::post_round(RoundJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(Job{nullptr, std::move(job)});
    waiting_rounds_ += 1;
  }
  cv_.notify_one();
}

int32_t ComputeQueue::waiting_rounds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_rounds_;
}

void ComputeQueue::take_rounds(std::vector<RoundJob>& rounds, std::vector<Chunk>& chunks) {
  // Consecutive rounds from the front, in order, while they fit the budget:
  // a plain job, or a round that does not fit and has no prefill to cut,
  // ends the batch, so no job is overtaken.
  int64_t rows = 0;
  int32_t taken = 0;
  while (!jobs_.empty() && jobs_.front().round) {
    RoundJob& next = *jobs_.front().round;
    const int64_t r = next.decoder->round_rows(*next.tree);
    const int64_t room = batching_.max_rows - rows;
    if (taken > 0 && !batching_.enabled) break;
    if (r > room) {
      // A round that fits a forward of its own waits for the next one; a
      // larger one (a long prompt) fills this one with a chunk of its prefill.
      // A round whose drafter reads the target's rows at every position
      // (hidden_rows) runs whole: a chunk's rows would not reach it.
      const int64_t chunk = r > batching_.max_rows && !next.request.extras.hidden_rows
                                ? std::min(next.decoder->prefill_left(), room)
                                : 0;
      if (chunk > 0) {
        chunks.push_back(Chunk{std::move(next), chunk});
        jobs_.pop_front();
        waiting_rounds_ -= 1;
        break;
      }
      if (taken > 0) break;  // it runs next, alone if it must
    }
    rows += r;
    taken += 1;
    rounds.push_back(std::move(next));
    jobs_.pop_front();
    waiting_rounds_ -= 1;
  }
}

void ComputeQueue::run(int compute_threads) {
  // OpenMP's thread count is per calling thread: set it where forwards run.
  set_compute_threads(compute_threads);
  const auto wait = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double, std::milli>(batching_.wait_ms));
  while (true) {
    std::function<void()> task;
    std::vector<RoundJob> rounds;
    std::vector<Chunk> chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      if (jobs_.front().round) {
        if (batching_.enabled && wait.count() > 0) {
          // Wait for more rounds until the first has waited its limit or the
          // rows queued fill a forward.
          const auto until = jobs_.front().round->queued + wait;
          cv_.wait_until(lock, until, [&] {
            if (stopping_) return true;
            int64_t rows = 0;
            for (const Job& j : jobs_) {
              if (!j.round) return true;
              rows += j.round->decoder->round_rows(*j.round->tree);
            }
            return rows >= batching_.max_rows;
          });
        }
        take_rounds(rounds, chunks);
      } else {
        task = std::move(jobs_.front().task);
        jobs_.pop_front();
      }
    }
    if (task) task();  // plain jobs report their own errors
    else run_rounds(std::move(rounds), std::move(chunks));
  }
}

void ComputeQueue::run_rounds(std::vector<RoundJob> jobs, std::vector<Chunk> chunks) {
  const auto start = SteadyClock::now();
  // A chunked round goes back to the queue's end once its chunk is in its
  // cache (or at once when the forward failed: it is retried whole).
  struct Requeue {
    ComputeQueue& q;
    std::vector<Chunk>& chunks;
    ~Requeue() {
      std::vector<RoundJob> back;
      for (Chunk& c : chunks) {
        if (c.job.wanted && !c.job.wanted()) {
          RoundVerified o;
          o.skipped = true;
          c.job.done(std::move(o));
        } else {
          back.push_back(std::move(c.job));
        }
      }
      if (back.empty()) return;
      {
        std::lock_guard<std::mutex> lock(q.mu_);
        for (RoundJob& j : back) q.jobs_.push_back(Job{nullptr, std::move(j)});
        q.waiting_rounds_ += static_cast<int32_t>(back.size());
      }
      q.cv_.notify_one();
    }
  } requeue{*this, chunks};
  std::vector<RoundJob> live;
  for (RoundJob& j : jobs) {
    RoundVerified o;
    o.queue_ms = ms_between(j.queued, start);
    if (j.wanted && !j.wanted()) {
      o.skipped = true;
    } else {
      try {
        j.decoder->check_round(*j.tree);
        live.push_back(std::move(j));
        continue;
      } catch (const Error& e) {
        o.invalid = true;
        o.error = e.what();
      }
    }
    j.done(std::move(o));
  }
  std::vector<TargetDecoder::Prefill> prefills;
  int64_t rows = 0;
  for (const Chunk& c : chunks)
    if (!c.job.wanted || c.job.wanted()) {
      prefills.push_back({c.job.decoder, c.tokens});
      rows += c.tokens;
    }
  if (live.empty() && prefills.empty()) return;
  for (const RoundJob& j : live) rows += j.decoder->round_rows(*j.tree);
  std::vector<TargetDecoder::BatchRound> batch;
  for (RoundJob& j : live) batch.push_back({j.decoder, j.tree.get(), &j.request});
  stats_.prefill_chunks.fetch_add(static_cast<int64_t>(prefills.size()));
  auto outcome = [&](const RoundJob& j, int32_t rounds, int64_t r) {
    RoundVerified o;
    o.queue_ms = ms_between(j.queued, start);
    o.batch_rounds = rounds;
    o.batch_rows = static_cast<int32_t>(r);
    stats_.queue_ms.Observe(o.queue_ms);
    return o;
  };
  std::vector<RoundResult> results;
  std::string batch_error;
  const auto forward_start = SteadyClock::now();
  try {
    results = TargetDecoder::verify_batch(batch, prefills, emulation_);
  } catch (const std::exception& e) {
    batch_error = e.what();
  }
  const double forward_ms = ms_since(forward_start);
  if (batch_error.empty()) {
    stats_.batch_rounds.Observe(static_cast<double>(live.size() + prefills.size()));
    stats_.batch_rows.Observe(static_cast<double>(rows));
    stats_.forward_ms.Observe(forward_ms);
    for (size_t i = 0; i < live.size(); ++i) {
      RoundVerified o = outcome(live[i], static_cast<int32_t>(live.size() + prefills.size()), rows);
      o.result = std::move(results[i]);
      stats_.round_ms.Observe(o.queue_ms + o.result->forward_ms + o.result->verify_ms);
      live[i].done(std::move(o));
    }
    return;
  }
  // A failure of the shared forward (a tap that threw, say) left every cache
  // unchanged: each round runs again alone, so only its own owner sees its
  // error.
  for (RoundJob& j : live) {
    const int64_t r = j.decoder->round_rows(*j.tree);
    RoundVerified o = outcome(j, 1, r);
    try {
      o.result = std::move(TargetDecoder::verify_batch({{j.decoder, j.tree.get(), &j.request}}, {}, emulation_)[0]);
      stats_.batch_rounds.Observe(1);
      stats_.batch_rows.Observe(static_cast<double>(r));
      stats_.forward_ms.Observe(o.result->forward_ms);
      stats_.round_ms.Observe(o.queue_ms + o.result->forward_ms + o.result->verify_ms);
    } catch (const Error& e) {
      o.invalid = true;
      o.error = e.what();
    } catch (const std::exception& e) {
      o.error = e.what();
    }
    j.done(std::move(o));
  }
}

}  // namespace splitspec

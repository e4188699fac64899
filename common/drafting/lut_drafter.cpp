// `lut`: DIAA's model-free drafter. Candidates come from the look-up tables
// (lut_tables.h); a dynamic token tree (dynamic_tree.h) is grown from them
// under a node budget. After each round the tables learn the target's top K
// at every appended token's position (asked of the verifier through wants())
// and the appended tokens themselves.
//
// Computation overlap: a round's table updates are not needed to build the
// next tree (its keys end before the new last token), so they wait and are
// applied on a worker thread while the next round is verified.
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>

#include "common/drafting/drafter_options.h"
#include "common/drafting/dynamic_tree.h"
#include "common/drafting/lut_tables.h"
#include "common/drafting/registry.h"
#include "common/util/error.h"
#include "common/util/stopwatch.h"

namespace splitspec {

namespace {

// Runs one job at a time on its own thread; wait() returns when it is done.
class Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = std::move(job);
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !job_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      cv_.wait(lk, [&] { return quit_ || job_; });
      if (quit_) return;
      lk.unlock();
      try {
        job_();
      } catch (...) {
        error_ = std::current_exception();
      }
      lk.lock();
      job_ = nullptr;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  std::exception_ptr error_;
  bool quit_ = false;
  std::thread thread_;
};

class LutDrafter final : public Drafter {
 public:
  LutDrafter(std::shared_ptr<LutTables> tables, const DynamicTreeOptions& tree, std::string name)
      : tables_(std::move(tables)), tree_(tree), name_(std::move(name)) {}

  std::string name() const override { return name_; }
  ExtrasRequest wants() const override { return {tables_->options().k, false}; }
  size_t memory_bytes() const override {
    return tables_->memory_bytes() + history_.capacity() * sizeof(int32_t) + pending_bytes_;
  }

  void verifying(const std::function<bool()>&) override {
    if (pending_.empty()) return;
    if (!worker_) worker_ = std::make_unique<Worker>();
    worker_->post([this] { apply_pending(); });
    working_ = true;
  }
  void verified() override {
    if (!working_) return;
    const auto t0 = SteadyClock::now();
    worker_->wait();
    working_ = false;
    stats_.drafter_counters["lut_update_wait_ms"] += ms_since(t0);
  }

 private:
  struct Pending {
    int64_t position;  // the context is history_[0, position)
    int32_t token;     // what followed it
    TopK top_k;        // the target's top K there (empty if not sent)
  };

  void on_begin(const std::vector<int32_t>& prompt) override {
    apply_pending();  // whatever the last generation left
    history_ = prompt;
    // The prompt's own continuations: what prompt lookup would find.
    const auto t0 = SteadyClock::now();
    for (size_t i = 1; i < history_.size(); ++i)
      tables_->observe(history_.data() + i, static_cast<int64_t>(i), history_[i]);
    stats_.drafter_counters["lut_update_ms"] += ms_since(t0);
    stats_.drafter_counters["lut_bytes"] = static_cast<double>(tables_->memory_bytes());
  }

  DraftTree on_propose(int32_t budget, const std::function<bool()>&) override {
    DynamicTreeOptions o = tree_;
    o.budget = std::min(o.budget, budget);
    const int32_t order = tables_->options().order;
    const size_t keep = std::min(history_.size(), static_cast<size_t>(order));
    DynamicTree t = build_dynamic_tree(
        [&](const DraftTree& tree, int32_t node, std::vector<LutCandidate>& out) {
          // The last `order` tokens of the history, then the path to `node`.
          path_.clear();
          for (int32_t v = node; v >= 0; v = tree.parents[v]) path_.push_back(tree.tokens[v]);
          context_.assign(history_.end() - static_cast<std::ptrdiff_t>(keep), history_.end());
          context_.insert(context_.end(), path_.rbegin(), path_.rend());
          tables_->lookup(context_.data() + context_.size(), static_cast<int64_t>(context_.size()), out);
        },
        o);
    stats_.drafter_counters["lut_expansions"] += t.expansions;
    return std::move(t.tree);
  }

  void on_accept(const RoundOutcome& outcome) override {
    // Updates not applied during the round's verification (no verifying()
    // call, as for a caller driving the drafter by hand) are applied now.
    apply_pending();
    const std::vector<int32_t>& tokens = outcome.verdict.tokens;
    const bool have_top_k = outcome.extras.top_k.size() == tokens.size();
    for (size_t i = 0; i < tokens.size(); ++i) {
      Pending p{static_cast<int64_t>(history_.size()), tokens[i], have_top_k ? outcome.extras.top_k[i] : TopK{}};
      pending_bytes_ += p.top_k.ids.size() * (sizeof(int32_t) + sizeof(float));
      pending_.push_back(std::move(p));
      history_.push_back(tokens[i]);
    }
  }

  void apply_pending() {
    if (pending_.empty()) return;
    const auto t0 = SteadyClock::now();
    for (const Pending& p : pending_) {
      const int32_t* end = history_.data() + p.position;
      if (!p.top_k.ids.empty()) tables_->update(end, p.position, p.top_k.ids, p.top_k.probs);
      tables_->observe(end, p.position, p.token);
    }
    pending_.clear();
    pending_bytes_ = 0;
    // Written by the worker while the main thread waits in verified(), or
    // by the main thread itself: never both at once.
    stats_.drafter_counters["lut_update_ms"] += ms_since(t0);
  }

  std::shared_ptr<LutTables> tables_;
  DynamicTreeOptions tree_;
  std::string name_;
  std::vector<int32_t> history_;  // prompt and committed tokens
  std::vector<Pending> pending_;
  size_t pending_bytes_ = 0;
  std::vector<int32_t> path_, context_;
  std::unique_ptr<Worker> worker_;
  bool working_ = false;
};

}  // namespace

std::unique_ptr<Drafter> make_lut_drafter(const DrafterSpec& spec) {
  DrafterOptions opt("lut", spec.options);
  // As the recurrent head is: tables shipped beside the target are found
  // there, unless the options ask for cold tables (tables=none, or their
  // own k, order or slots).
  const bool cold_shape = spec.options.count("k") || spec.options.count("order") || spec.options.count("slots");
  std::string beside;
  if (!spec.target_dir.empty() && !cold_shape &&
      std::filesystem::exists(std::filesystem::path(spec.target_dir) / "lut.safetensors"))
    beside = (std::filesystem::path(spec.target_dir) / "lut.safetensors").string();
  std::string path = opt.text("tables", beside);
  if (path == "none") path.clear();
  LutOptions lo;
  lo.k = opt.integer("k", lo.k);
  lo.order = opt.integer("order", lo.order);
  lo.slots = opt.integer("slots", lo.slots);
  // Defaults from a sweep on the demo pair (docs/drafters.md): in memory a
  // verification of more than 4 rows costs half as much again, so trees stay
  // small; streamed weights make nodes nearly free; a round trip is worth a
  // middling tree.
  DynamicTreeOptions t;
  switch (spec.verify_cost) {
    case VerifyCost::kCompute: t.budget = 3; break;
    case VerifyCost::kWeightReads: t.budget = 32, t.threshold = 0; break;
    case VerifyCost::kRoundTrip: t.budget = 8; break;
  }
  t.budget = opt.integer("budget", t.budget);
  t.depth_decay = opt.real("delta", t.depth_decay);
  t.width_decay = opt.real("alpha", t.width_decay);
  t.threshold = opt.real("tau", t.threshold);
  t.max_depth = opt.integer("max_depth", t.max_depth);
  const std::string shape = opt.text("tree", "dynamic");
  if (shape != "dynamic" && shape != "static")
    throw Error("drafter lut: option tree=" + shape + " is neither dynamic nor static");
  t.static_shape = shape == "static";
  t.static_width = opt.integer("width", t.static_width);
  t.static_root_width = opt.integer("root_width", t.static_root_width);
  opt.finish();
  t.validate();
  if (spec.vocab_size < 1) throw Error("drafter lut: the target's vocabulary size is unknown");

  // One set of tables per client: every generation learns into it.
  if (!spec.state->value) {
    if (path.empty()) {
      spec.state->value = std::make_shared<LutTables>(spec.vocab_size, lo);
    } else {
      if (cold_shape)
        throw Error("drafter lut: k, order and slots come from the tables file " + path + "; give them only to start cold");
      spec.state->value =
          std::make_shared<LutTables>(LutTables::load(path, spec.vocab_size, spec.tokenizer_fingerprint));
    }
  }
  auto tables = std::static_pointer_cast<LutTables>(spec.state->value);
  return std::make_unique<LutDrafter>(std::move(tables), t, "lut");
}

}  // namespace splitspec

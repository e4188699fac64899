#include "common/drafting/tree_drafter.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <sstream>
#include <mutex>
#include <thread>
#include <utility>

#include "common/decoding/verify.h"
#include "common/drafting/drafter_options.h"
#include "common/drafting/model_drafter.h"
#include "common/drafting/registry.h"
#include "common/kernels/threads.h"
#include "common/util/error.h"
#include "common/util/stopwatch.h"

namespace splitspec {

void TreeOptions::validate() const {
  if (tree_nodes < 1) throw Error("tree-nodes must be at least 1");
  if (max_tree_nodes < 1) throw Error("max-tree-nodes must be at least 1");
  if (max_provisional < 0) throw Error("max-provisional must be >= 0");
  if (max_children < 1) throw Error("max-children must be at least 1");
  if (draft_width < 1) throw Error("draft-width must be at least 1");
  FallbackThreshold check(initial_alpha);  // throws on an alpha outside (0, 1]
}

TreeOptions TreeOptions::read(DrafterOptions& o) {
  TreeOptions t;
  t.fallback = o.integer("fallback", t.fallback) != 0;
  t.provisional = o.integer("provisional", t.provisional) != 0;
  t.tree_nodes = o.integer("nodes", t.tree_nodes);
  t.max_tree_nodes = o.integer("max_nodes", t.max_tree_nodes);
  t.initial_alpha = o.real("alpha", t.initial_alpha);
  t.max_provisional = o.integer("max_provisional", t.max_provisional);
  t.max_children = o.integer("max_children", t.max_children);
  t.draft_width = o.integer("draft_width", t.draft_width);
  t.validate();
  return t;
}

std::map<std::string, std::string> TreeOptions::options() const {
  std::ostringstream alpha;
  alpha.precision(17);
  alpha << initial_alpha;
  return {{"fallback", fallback ? "1" : "0"},
          {"provisional", provisional ? "1" : "0"},
          {"nodes", std::to_string(tree_nodes)},
          {"max_nodes", std::to_string(max_tree_nodes)},
          {"alpha", alpha.str()},
          {"max_provisional", std::to_string(max_provisional)},
          {"max_children", std::to_string(max_children)},
          {"draft_width", std::to_string(draft_width)}};
}

// Provisional generation (§III-D) on its own thread. It drafts only while
// the verifier has compute to spare (the target's forward waits for
// weights), and at the lowest CPU priority (SCHED_IDLE), so that the
// forward's compute and the weight loader always win a contended core:
// EdgeLLM's rule that provisional work must not slow the verification down.
class ProvisionalWorker {
 public:
  ProvisionalWorker(TreeDrafter& drafter, int32_t max_tokens, int threads)
      : drafter_(drafter), max_tokens_(max_tokens), threads_(threads) {
    thread_ = std::thread([this] { loop(); });
  }
  ~ProvisionalWorker() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Drafts on the frozen tree while `spare` says so, until stop().
  void start(const std::function<bool()>& spare) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      spare_ = spare;
      active_ = true;
      drafted_ = 0;
    }
    cv_.notify_all();
  }
  // Returns once no step is running; the drafter is the caller's again.
  int64_t stop() {
    std::unique_lock<std::mutex> lk(mu_);
    active_ = false;
    cv_.wait(lk, [&] { return !in_step_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return drafted_;
  }

 private:
  void loop() {
    sched_param lowest{};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &lowest);  // best effort
    set_compute_threads(threads_);
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      cv_.wait(lk, [&] { return quit_ || active_; });
      if (quit_) return;
      bool drafted = false;
      if (spare_() && drafter_.provisional() < max_tokens_ && !error_) {
        in_step_ = true;
        lk.unlock();
        try {
          drafted = drafter_.extend_provisional();
        } catch (...) {
          lk.lock();
          error_ = std::current_exception();
          lk.unlock();
        }
        lk.lock();
        in_step_ = false;
        if (drafted) drafted_ += 1;
        cv_.notify_all();
      }
      if (!drafted) cv_.wait_for(lk, std::chrono::microseconds(50));
    }
  }

  TreeDrafter& drafter_;
  const int32_t max_tokens_;
  const int threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<bool()> spare_;
  bool active_ = false, in_step_ = false, quit_ = false;
  int64_t drafted_ = 0;
  std::exception_ptr error_;
  std::thread thread_;
};

TreeDrafter::TreeDrafter(std::shared_ptr<const Model> draft, const TreeOptions& options, int threads)
    : draft_(std::move(draft)), options_(options), threads_(threads), cache_(draft_->new_cache()),
      threshold_(options.initial_alpha) {
  options_.validate();
}

TreeDrafter::~TreeDrafter() = default;

void TreeDrafter::on_begin(const std::vector<int32_t>& prompt) {
  prefill_draft(*draft_, cache_, prompt);
  seq_ = prompt;
  nodes_.clear();
  branch_len_.clear();
  root_ = Node{};
  root_expanded_ = false;
  provisional_ = 0;
  anchor_ = -1;
  frozen_ = false;
  // Each generation learns its calibration and threshold afresh.
  calibration_ = ConfidenceCalibration{};
  threshold_ = FallbackThreshold(options_.initial_alpha);
  stats_.final_alpha = threshold_.alpha();
}

bool TreeDrafter::outgrown() const {
  return static_cast<int64_t>(seq_.size()) >
         std::min<int64_t>(cache_.capacity(), draft_->config().max_position_embeddings);
}

DraftTree TreeDrafter::on_propose(int32_t budget, const std::function<bool()>& stop) {
  if (outgrown()) {
    // The generation has outgrown the draft's context: the target goes on
    // alone, one token a round.
    anchor_ = -1;
    frozen_ = true;
    return DraftTree{};
  }
  const TreeOptions& o = options_;
  const int32_t cap = std::min(budget, o.fallback ? o.max_tree_nodes : o.tree_nodes);
  start_round(cap, o.fallback ? threshold_.alpha() : 0.0);
  while (size() < cap) {
    if (stop && stop()) break;
    if (o.fallback && size() > 0 && threshold_.fall_back(tree_confidence())) break;
    if (grow(std::min(o.draft_width, cap - size())) == 0) break;
  }
  return tree();
}

void TreeDrafter::on_accept(const RoundOutcome& outcome) {
  if (options_.fallback) threshold_.update(this->outcome(outcome.verdict));
  stats_.provisional_kept += commit(outcome.verdict);
  stats_.final_alpha = threshold_.alpha();
}

void TreeDrafter::verifying(const std::function<bool()>& spare_compute) {
  if (!options_.provisional || !spare_compute || options_.max_provisional <= 0) return;
  if (!worker_) worker_ = std::make_unique<ProvisionalWorker>(*this, options_.max_provisional, threads_);
  worker_->start(spare_compute);
  working_ = true;
}

void TreeDrafter::verified() {
  if (!working_) return;
  working_ = false;
  stats_.provisional_tokens += worker_->stop();
}

std::unique_ptr<Drafter> TreeDrafter::fork() const {
  auto copy = std::make_unique<TreeDrafter>(draft_, options_, threads_);
  copy->assign_state(*this);
  return copy;
}

void TreeDrafter::on_assign(const Drafter& other) {
  const auto& o = static_cast<const TreeDrafter&>(other);
  cache_.copy_prefix_from(o.cache_, o.cache_.size());
  seq_ = o.seq_;
  base_ = o.base_;
  root_ = o.root_;
  root_expanded_ = o.root_expanded_;
  nodes_ = o.nodes_;
  provisional_ = o.provisional_;
  anchor_ = o.anchor_;
  branch_len_ = o.branch_len_;
  calibration_ = o.calibration_;
  threshold_ = o.threshold_;
  frozen_ = o.frozen_;
}

void TreeDrafter::on_swap(Drafter& other) {
  auto& o = static_cast<TreeDrafter&>(other);
  std::swap(cache_, o.cache_);
  std::swap(seq_, o.seq_);
  std::swap(base_, o.base_);
  std::swap(root_, o.root_);
  std::swap(root_expanded_, o.root_expanded_);
  std::swap(nodes_, o.nodes_);
  std::swap(provisional_, o.provisional_);
  std::swap(anchor_, o.anchor_);
  std::swap(branch_len_, o.branch_len_);
  std::swap(calibration_, o.calibration_);
  std::swap(threshold_, o.threshold_);
  std::swap(frozen_, o.frozen_);
}

size_t TreeDrafter::memory_bytes() const {
  size_t bytes = cache_.bytes() + seq_.capacity() * sizeof(int32_t);
  auto of = [](const Node& n) { return n.q.capacity() * sizeof(float) + n.ranked.capacity() * sizeof(n.ranked[0]); };
  bytes += sizeof(Node) + of(root_);
  for (const Node& n : nodes_) bytes += sizeof(Node) + of(n);
  return bytes;
}

std::unique_ptr<Drafter> make_tree_drafter(const DrafterSpec& spec) {
  DrafterOptions options("model-tree", spec.options);
  const TreeOptions tree = TreeOptions::read(options);
  options.finish();
  return std::make_unique<TreeDrafter>(spec.draft, tree, spec.threads);
}

void TreeDrafter::expand(Node& n, const float* row) {
  const SamplingParams& params = this->params().sampling;
  const int64_t V = draft_->config().vocab_size;
  n.next = 0;
  n.children = 0;
  if (params.greedy()) {
    // By the project's tie rule, so the first child is always the draft's
    // own greedy choice.
    const TopK top = top_k_of_row(row, V, options_.max_children, ranked_ids_);
    n.ranked.clear();
    for (size_t i = 0; i < top.ids.size(); ++i) n.ranked.emplace_back(top.ids[i], top.probs[i]);
  } else {
    n.q = filtered_distribution(row, V, params);
    double s = 0;
    for (float v : n.q) s += static_cast<double>(v) * v;
    n.match = s;
  }
}

double TreeDrafter::offer(const Node& n) const {
  if (!n.q.empty()) {
    double v = n.match;
    for (int32_t i = 0; i < n.children; ++i) v *= 1.0 - n.match;
    return v;
  }
  if (n.next >= static_cast<int32_t>(n.ranked.size())) return 0.0;
  return n.ranked[n.next].second;
}

void TreeDrafter::start_round(int32_t max_nodes, double min_confidence) {
  frozen_ = false;
  if (!root_expanded_) {
    // The committed tokens the cache lacks: the last one, or more after the
    // prompt. Their last row is the root's next-token distribution.
    ForwardRequest r;
    r.tokens.assign(seq_.begin() + cache_.size(), seq_.end());
    r.logits_rows = std::vector<int64_t>{static_cast<int64_t>(r.tokens.size()) - 1};
    const ForwardResult out = draft_->forward(r, cache_);
    root_ = Node{};
    expand(root_, out.logits.row(0));
    root_expanded_ = true;
    stats_.draft_forwards += 1;
  } else {
    // The kept nodes are a chain: keep a prefix of it.
    int32_t keep = std::min(static_cast<int32_t>(nodes_.size()), std::max(0, max_nodes));
    if (params().sampling.greedy())
      while (keep > 0 && nodes_[keep - 1].conf < min_confidence) --keep;
    if (keep < static_cast<int32_t>(nodes_.size())) trim(keep);
  }
  base_ = static_cast<int64_t>(seq_.size());
}

void TreeDrafter::trim(int32_t keep) {
  nodes_.resize(keep);
  index_branches();
  cache_.truncate(base_ + static_cast<int64_t>(nodes_.size()));
  // The last kept node (or the root) offers its dropped child again.
  Node& last = node(static_cast<int32_t>(nodes_.size()) - 1);
  last.children = std::max(0, last.children - 1);
  if (last.q.empty()) last.next = std::max(0, last.next - 1);
}

TreeDrafter::Node TreeDrafter::make_child(int32_t parent) {
  Node n;
  Node& p = node(parent);
  if (p.q.empty()) {
    std::tie(n.token, n.prob) = p.ranked[p.next];
    n.rank = p.next;
    p.next += 1;
  } else {
    n.token = rng().categorical(p.q);
    n.prob = p.q[n.token];
    n.rank = static_cast<int32_t>(std::count_if(p.q.begin(), p.q.end(), [&](float v) { return v > n.prob; }));
  }
  if (parent >= 0 && p.children == 0) {
    n.branch = p.branch;
  } else {
    n.branch = static_cast<int32_t>(branch_len_.size());
    branch_len_.push_back(0);
  }
  branch_len_[n.branch] += 1;
  p.children += 1;
  n.parent = parent;
  n.depth = p.depth + 1;
  n.conf = p.conf * calibration_(n.rank, n.prob);
  return n;
}

void TreeDrafter::draft_nodes(int32_t first) {
  // Each new node at its tree position, seeing the committed prefix, its
  // ancestors and itself: node i is cache slot base_ + i.
  const auto count = static_cast<int64_t>(nodes_.size()) - first;
  const int64_t width = base_ + static_cast<int64_t>(nodes_.size());
  ForwardRequest r;
  r.mask = AttentionMask(count, width);
  for (int64_t k = 0; k < count; ++k) {
    const int32_t i = first + static_cast<int32_t>(k);
    r.tokens.push_back(nodes_[i].token);
    r.positions.push_back(base_ - 1 + nodes_[i].depth);
    uint8_t* row = r.mask.row(k);
    std::fill(row, row + base_, 1);
    for (int32_t a = i; a >= 0; a = nodes_[a].parent) row[base_ + a] = 1;
  }
  const ForwardResult out = draft_->forward(r, cache_);
  for (int64_t k = 0; k < count; ++k) expand(nodes_[first + k], out.logits.row(k));
  stats_.draft_forwards += 1;
}

int32_t TreeDrafter::grow(int32_t width) {
  if (frozen_) throw Error("tree drafter: grow() after tree(); call commit() first");
  const int64_t room = std::min<int64_t>(cache_.capacity() - cache_.size(),
                                         draft_->config().max_position_embeddings - base_ - size());
  width = static_cast<int32_t>(std::min<int64_t>(width, room));
  const int32_t first = size();
  // The pacer's picks, one after another; a node picked in this step has not
  // been through the draft yet and so offers nothing until the forward.
  for (int32_t k = 0; k < width; ++k) {
    const double M = static_cast<double>(size() + 1);
    int32_t pick = -2;
    double best = 0;
    for (int32_t i = -1; i < size(); ++i) {
      if (offer(node(i)) <= 0.0) continue;
      const double s = shortfall(i, M);
      if (pick == -2 || s > best) {
        pick = i;
        best = s;
      }
    }
    if (pick == -2) break;
    nodes_.push_back(make_child(pick));
  }
  const int32_t added = size() - first;
  if (added > 0) draft_nodes(first);
  return added;
}

double TreeDrafter::shortfall(int32_t i, double M) const {
  const Node& n = node(i);
  if (i >= 0 && n.children == 0) return M * n.conf - branch_len_[n.branch];
  const int32_t rank = n.q.empty() ? n.next : 0;
  return M * n.conf * (n.q.empty() ? calibration_(rank, offer(n)) : offer(n));
}

void TreeDrafter::index_branches() {
  branch_len_.clear();
  std::vector<char> has_child(nodes_.size(), 0);
  for (Node& n : nodes_) {
    if (n.parent >= 0 && !has_child[n.parent]) {
      n.branch = nodes_[n.parent].branch;
    } else {
      n.branch = static_cast<int32_t>(branch_len_.size());
      branch_len_.push_back(0);
    }
    if (n.parent >= 0) has_child[n.parent] = 1;
    branch_len_[n.branch] += 1;
  }
}

double TreeDrafter::tree_confidence() const {
  double tc = 0;
  bool any = false;
  for (int32_t i = 0; i < size(); ++i)
    if (nodes_[i].children == 0) {
      tc = std::max(tc, nodes_[i].conf);
      any = true;
    }
  return any ? tc : 1.0;
}

int32_t TreeDrafter::best_leaf() const {
  int32_t best = -1;
  for (int32_t i = 0; i < size(); ++i)
    if (nodes_[i].children == 0 && (best < 0 || nodes_[i].conf > nodes_[best].conf)) best = i;
  return best;
}

DraftTree TreeDrafter::tree() {
  DraftTree t;
  for (int32_t i = 0; i < size(); ++i) {
    t.tokens.push_back(nodes_[i].token);
    t.parents.push_back(nodes_[i].parent);
    if (!node(nodes_[i].parent).q.empty()) t.q.push_back(node(nodes_[i].parent).q);
  }
  anchor_ = best_leaf();
  frozen_ = true;
  return t;
}

bool TreeDrafter::extend_provisional() {
  if (!frozen_) throw Error("tree drafter: provisional tokens extend a frozen tree; call tree() first");
  if (outgrown()) return false;
  if (cache_.size() + 1 > cache_.capacity() ||
      base_ + static_cast<int64_t>(nodes_.size()) >= draft_->config().max_position_embeddings)
    return false;
  const int32_t parent = provisional_ == 0 ? anchor_ : static_cast<int32_t>(nodes_.size()) - 1;
  if (offer(node(parent)) <= 0.0) return false;
  const auto t0 = SteadyClock::now();
  nodes_.push_back(make_child(parent));
  draft_nodes(static_cast<int32_t>(nodes_.size()) - 1);
  provisional_ += 1;
  stats_.draft_ms += ms_since(t0);
  return true;
}

BranchOutcome TreeDrafter::outcome(const Verdict& v) const {
  BranchOutcome o;
  // The most confident leaf below the accepted path's end.
  const int32_t end = v.path.empty() ? -1 : v.path.back();
  int32_t leaf = -2;
  for (int32_t i = 0; i < size(); ++i) {
    if (nodes_[i].children > 0 && !(i == anchor_ && provisional_ > 0)) continue;
    bool below = false;
    for (int32_t a = i; a >= -1 && !below; a = a < 0 ? -2 : nodes_[a].parent) below = a == end;
    if (below && (leaf == -2 || nodes_[i].conf > nodes_[leaf].conf)) leaf = i;
  }
  if (leaf == -2) {  // the accepted path ends in a leaf
    o.n_all = o.n_correct = static_cast<int32_t>(v.path.size());
    return o;
  }
  o.n_all = nodes_[leaf].depth;
  o.n_correct = v.accepted;
  double sum = 0;
  int32_t count = 0;
  for (int32_t a = leaf; a >= 0 && nodes_[a].depth > o.n_correct; a = nodes_[a].parent) {
    sum += nodes_[a].conf;
    ++count;
  }
  o.wrong_confidence = count ? sum / count : 1.0;
  return o;
}

int32_t TreeDrafter::commit(const Verdict& v) {
  if (outgrown()) {
    // Nothing was drafted (on_propose): the tokens are only recorded.
    if (!v.path.empty()) throw Error("tree drafter: a verdict accepts nodes of an empty tree");
    seq_.insert(seq_.end(), v.tokens.begin(), v.tokens.end());
    frozen_ = false;
    return 0;
  }
  const int32_t tree_size = size();
  for (int32_t node : v.path)
    if (node < 0 || node >= tree_size)
      throw Error("tree drafter: the verdict's path names node " + std::to_string(node) + " of a " +
                  std::to_string(tree_size) + "-node tree");
  const int32_t end = v.path.empty() ? -1 : v.path.back();
  const bool keep = provisional_ > 0 && end == anchor_ && v.tokens.size() == v.path.size() + 1 &&
                    nodes_[tree_size].token == v.tokens.back();

  // Calibration: a node was put to the test when its parent was accepted
  // (or is the root); it passed when it is on the accepted path.
  {
    std::vector<char> on_path(tree_size, 0);
    for (int32_t i : v.path) on_path[i] = 1;
    for (int32_t i = 0; i < tree_size; ++i) {
      const int32_t p = nodes_[i].parent;
      if (p < 0 || on_path[p]) calibration_.record(nodes_[i].rank, nodes_[i].prob, on_path[i] != 0);
    }
  }
  std::vector<int64_t> rows(v.path.begin(), v.path.end());
  if (keep)
    for (int32_t i = tree_size; i < static_cast<int32_t>(nodes_.size()); ++i) rows.push_back(i);
  cache_.keep(base_, rows);
  seq_.insert(seq_.end(), v.tokens.begin(), v.tokens.end());
  int32_t kept = 0;
  if (keep) {
    // The first provisional node is the target's own token now: the new root.
    kept = provisional_;
    std::vector<Node> next(nodes_.begin() + tree_size + 1, nodes_.end());
    // It has been through the draft: the next round needs no forward for it.
    root_ = std::move(nodes_[tree_size]);
    root_expanded_ = true;
    root_.parent = -1;
    root_.depth = 0;
    root_.conf = 1.0;
    double conf = 1.0;
    for (int32_t i = 0; i < static_cast<int32_t>(next.size()); ++i) {
      next[i].parent = i - 1;
      next[i].depth = i + 1;
      conf *= calibration_(next[i].rank, next[i].prob);
      next[i].conf = conf;
    }
    nodes_ = std::move(next);
    index_branches();
  } else {
    nodes_.clear();
    branch_len_.clear();
    root_ = Node{};
    root_expanded_ = false;
    // Every committed token but the last; a verdict cut at a stop may leave more.
    if (cache_.size() > static_cast<int64_t>(seq_.size()) - 1) cache_.truncate(static_cast<int64_t>(seq_.size()) - 1);
  }
  base_ = static_cast<int64_t>(seq_.size());
  provisional_ = 0;
  anchor_ = -1;
  frozen_ = false;
  return kept;
}

}  // namespace splitspec

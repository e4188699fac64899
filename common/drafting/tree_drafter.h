#pragma once
// `model-tree`: EdgeLLM's width-adaptive token tree (§III-B), drafted node by
// node by a draft model, grown until the self-adaptive fallback (§III-C) says
// to verify, and extended provisionally while the verifier waits for weights
// (§III-D).
//
// Branch pacer. Every node in the tree has been through the draft, so each
// offers a next child (greedily its most probable token not yet a child). A
// branch is a run of nodes: a node's first child continues its parent's
// branch, a later child opens a new one, so every node belongs to exactly
// one branch and the branches' lengths T_i add up to the tree's size M, as
// Eq. 1 (T_i = M * C_i, with sum C_i <= 1) needs. The pacer adds the token
// that most reduces D = max_i M * C_i - T_i (Eq. 2): it grows the branch
// furthest short of its length. A leaf's offer lengthens its branch, which
// is short by M * C_leaf - T; an inner node's offer opens a branch of
// confidence C_node * p, short by M * C_node * p. M is the size after the
// addition; C is cumulative confidence, the product along the path of each
// token's calibrated probability (confidence_calibration.h): the softmax at
// temperature 1 under greedy decoding, the post-filter q under sampling.
//
// Masked branch decoder. Each new node is drafted at its tree position, under
// a mask that shows it the committed prefix and its own ancestors only, so
// all branches share one KV cache with no context switch; verification keeps
// the accepted path and compacts the cache. The nodes the pacer picks in one
// step share one draft forward (our addition: the paper drafts one node per
// forward), which makes large trees affordable.
//
// Provisional generation (§III-D): while the target verifies a tree, the
// drafter may extend that tree's most confident branch past it, on a thread
// of its own at the lowest CPU priority and only while the verifier has
// compute to spare. When the verdict accepts that whole branch and the
// target's next token is the first provisional one, the rest are kept as the
// next tree's first nodes.
//
// Sampling: siblings are independent draws from their parent's q, which is
// what the tree verifier (verify.h) needs to be exact; and whether a child is
// added never depends on its own value, else the added ones would not follow
// q. So under sampling the pacer sees, instead of a drawn token's
// probability, the chance that a draw from q matches another, s = sum q^2,
// times (1 - s) per sibling already there; the token is drawn once chosen.
#include <cstdint>
#include <memory>
#include <vector>

#include "common/drafting/confidence_calibration.h"
#include "common/drafting/drafter.h"
#include "common/drafting/fallback_threshold.h"
#include "common/drafting/tree_options.h"
#include "common/model/model.h"

namespace splitspec {

class ProvisionalWorker;

class TreeDrafter final : public Drafter {
 public:
  // `threads`: compute threads of the provisional worker.
  TreeDrafter(std::shared_ptr<const Model> draft, const TreeOptions& options, int threads = 1);
  ~TreeDrafter() override;

  std::string name() const override { return "model-tree"; }
  void verifying(const std::function<bool()>& spare_compute) override;
  void verified() override;
  bool can_fork() const override { return true; }
  std::unique_ptr<Drafter> fork() const override;
  size_t memory_bytes() const override;

  // The steps propose() takes, public for tests and ablations.
  //
  // Starts a round's tree: the draft reads the committed tokens it lacks.
  // Provisional nodes kept from the last round are the tree's first nodes:
  // at most `max_nodes` of them and, under greedy decoding, only those whose
  // cumulative confidence is at least `min_confidence` (the fallback would
  // have stopped there). Sampling keeps them regardless of their values,
  // since dropping drawn tokens by value would bias what is verified.
  void start_round(int32_t max_nodes, double min_confidence = 0.0);
  // Adds up to `width` nodes the pacer picks, drafted together in one draft
  // forward (a forward of a few tokens costs about what one costs). Within a
  // step the pacer picks among nodes already drafted: a node added in this
  // step offers its children from the next. Returns the nodes added; 0 when
  // none can be (the draft's context is full, or nothing is on offer).
  int32_t grow(int32_t width = 1);
  // Tc: the highest cumulative confidence of any branch (1 for no tree).
  double tree_confidence() const;
  int32_t size() const { return static_cast<int32_t>(nodes_.size()) - provisional_; }
  // The committed tokens no longer fit the draft's context (shorter than
  // the target's): it drafts nothing more this generation.
  bool outgrown() const;
  // The tree to verify (q filled under sampling). Freezes it: from now until
  // commit(), only extend_provisional() grows anything.
  DraftTree tree();
  // One more token on the frozen tree's most confident branch. False when
  // the draft's context is full.
  bool extend_provisional();
  int32_t provisional() const { return provisional_; }
  // Eq. 3's evidence from `verdict` on the frozen tree; call before commit().
  BranchOutcome outcome(const Verdict& verdict) const;
  // Commits the verdict's tokens, keeps the accepted path in the cache and
  // the provisional nodes that continue it. Returns how many provisional
  // tokens were kept (the one that matched the target's own token included).
  int32_t commit(const Verdict& verdict);
  const std::vector<int32_t>& sequence() const { return seq_; }
  double alpha() const { return threshold_.alpha(); }

 private:
  struct Node {
    int32_t token = -1;
    int32_t parent = -1;  // -1: the root
    int32_t depth = 0;    // the root is 0
    float prob = 1.0f;    // the draft's probability of its token given its parent
    int32_t rank = 0;     // among the parent's candidates (0: most likely)
    double conf = 1.0;    // product of calibrated prob along the path
    int32_t branch = -1;  // the branch it belongs to (the root: none)
    // Children on offer: greedy: candidates by probability, next to offer at
    // `next`; sampling: q and s = sum q^2.
    std::vector<std::pair<int32_t, float>> ranked;
    int32_t next = 0;
    Distribution q;
    double match = 0;
    int32_t children = 0;
  };

  void on_begin(const std::vector<int32_t>& prompt) override;
  DraftTree on_propose(int32_t budget, const std::function<bool()>& stop) override;
  void on_accept(const RoundOutcome& outcome) override;
  void on_assign(const Drafter& other) override;
  void on_swap(Drafter& other) override;

  // The probability the pacer sees for the child `n` offers now (0: none).
  double offer(const Node& n) const;
  // Eq. 2's shortfall the child `i` offers would fix.
  double shortfall(int32_t i, double M) const;
  // Branch ids and lengths of nodes_ (after a change of the tree).
  void index_branches();
  // Drops the kept chain's nodes from `keep` on.
  void trim(int32_t keep);
  // Reads the draft's next-token distribution for `n` from its logits row.
  void expand(Node& n, const float* logits_row);
  // The child `parent` (-1: root) offers, booked in the parent and the
  // branches; drafted by draft_nodes().
  Node make_child(int32_t parent);
  // One draft forward for nodes_[first..]: expands each.
  void draft_nodes(int32_t first);
  Node& node(int32_t i) { return i < 0 ? root_ : nodes_[i]; }
  const Node& node(int32_t i) const { return i < 0 ? root_ : nodes_[i]; }
  // The frozen tree's most confident leaf.
  int32_t best_leaf() const;

  std::shared_ptr<const Model> draft_;
  TreeOptions options_;
  int threads_;
  KVCache cache_;  // the committed tokens but the last, then one entry per node
  std::vector<int32_t> seq_;
  int64_t base_ = 0;  // seq_.size() when the round started: node i is cache slot base_ + i
  Node root_;
  bool root_expanded_ = false;  // root_ holds the draft's distribution after the root
  std::vector<Node> nodes_;  // the tree, then provisional nodes
  int32_t provisional_ = 0;
  int32_t anchor_ = -1;     // the leaf provisional nodes grow from
  std::vector<int32_t> branch_len_;  // T_i of the tree's branches
  std::vector<int32_t> ranked_ids_;  // expand()'s scratch for top_k_of_row
  ConfidenceCalibration calibration_;
  FallbackThreshold threshold_;
  bool frozen_ = false;
  std::unique_ptr<ProvisionalWorker> worker_;  // started at the first verification with compute to spare
  bool working_ = false;                        // between verifying() and verified()
};

}  // namespace splitspec

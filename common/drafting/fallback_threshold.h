#pragma once
// EdgeLLM's self-adaptive fallback (§III-C): the draft keeps
// growing its token tree while the tree-cumulative confidence Tc (the highest
// cumulative confidence of any branch) stays at or above a threshold alpha,
// and alpha learns from each verification how far this draft can be trusted.
#include <cstdint>

namespace splitspec {

// How the most-matching branch of one verified tree fared: the branch that
// holds the accepted path (the most confident such branch when several do).
struct BranchOutcome {
  int32_t n_all = 0;      // its drafted tokens
  int32_t n_correct = 0;  // of those, accepted
  // Mean cumulative confidence of its tokens from the first wrong one to its
  // end (wrong one included); unused when every token was correct.
  double wrong_confidence = 1.0;
};

class FallbackThreshold {
 public:
  explicit FallbackThreshold(double initial_alpha = 0.01);

  // Verify now: Tc fell below alpha.
  bool fall_back(double tree_confidence) const { return tree_confidence < alpha_; }
  // Eq. 3 after a verification:
  //   alpha * 0.5                           if N_correct == N_all
  //   alpha / Tc^((N_all - N_correct) / N_all) otherwise.
  // We read Tc in the second case as the text beside Eq. 3 defines it: the
  // average cumulative confidence of the tokens from the incorrectly
  // generated one on (BranchOutcome::wrong_confidence), and the exponent as
  // the branch's share of wrong tokens. A confidence below 1 raised to a
  // share in (0, 1] is below 1, so alpha rises, the more the larger the share
  // of wrong tokens and the less confident they were: a draft that erred with
  // low confidence is cut off earlier next time.
  // alpha is kept in [1e-6, 1]: at 1 every tree is one node, below 1e-6 the
  // tree's node cap decides alone.
  void update(const BranchOutcome& outcome);
  double alpha() const { return alpha_; }

 private:
  double alpha_;
};

}  // namespace splitspec

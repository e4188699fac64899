#pragma once
// `model`: a draft model proposing a chain of gamma tokens a round, greedily
// or sampled (each token then carries the q it was drawn from). It keeps its
// own KV cache in step with the committed sequence.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/drafting/drafter.h"
#include "common/model/model.h"

namespace splitspec {

// Starts a draft's cache for `prompt`: every token but the last, which the
// first draft step reads. Throws splitspec::Error for an empty prompt or one
// the draft's context cannot hold.
void prefill_draft(const Model& draft, KVCache& cache, const std::vector<int32_t>& prompt);

class ModelDrafter final : public Drafter {
 public:
  explicit ModelDrafter(std::shared_ptr<const Model> draft);

  std::string name() const override { return "model"; }
  bool can_fork() const override { return true; }
  std::unique_ptr<Drafter> fork() const override;
  size_t memory_bytes() const override;
  const std::vector<int32_t>& sequence() const { return seq_; }

 private:
  void on_begin(const std::vector<int32_t>& prompt) override;
  DraftTree on_propose(int32_t budget, const std::function<bool()>& stop) override;
  void on_accept(const RoundOutcome& outcome) override;
  void on_assign(const Drafter& other) override;
  void on_swap(Drafter& other) override;

  std::shared_ptr<const Model> draft_;
  KVCache cache_;  // a prefix of seq_: every committed token but the last, plus the live draft
  std::vector<int32_t> seq_;
};

}  // namespace splitspec

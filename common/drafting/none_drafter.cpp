// `none`: proposes nothing, so every round is one plain decoding step (an
// empty tree verifies into exactly the target's own next token).
#include "common/drafting/drafter_options.h"
#include "common/drafting/registry.h"

namespace splitspec {

namespace {

class NoneDrafter final : public Drafter {
 public:
  std::string name() const override { return "none"; }
  size_t memory_bytes() const override { return 0; }

 private:
  void on_begin(const std::vector<int32_t>&) override {}
  DraftTree on_propose(int32_t, const std::function<bool()>&) override { return {}; }
  void on_accept(const RoundOutcome&) override {}
};

}  // namespace

std::unique_ptr<Drafter> make_none_drafter(const DrafterSpec& spec) {
  DrafterOptions("none", spec.options).finish();
  return std::make_unique<NoneDrafter>();
}

}  // namespace splitspec

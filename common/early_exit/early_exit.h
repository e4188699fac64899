#pragma once
// Early-exit adapters of a target model (the early-exit edge-cloud paper, Fig. 3): after a chosen
// layer, a small residual bottleneck MLP maps the hidden state towards what
// the final layer would hold, and the model's own final norm and LM head turn
// it into logits. Only the adapters are trained; the model stays frozen.
//
// Stored beside the model: early_exits.json ({"after_layers": [..],
// "bottleneck": b, "hidden_size": h, optional "serve_layers": [..], optional
// "frequent_tokens": [..]}) and early_exits.safetensors (per exit
// k, the count of layers it follows: exits.k.norm.weight [h],
// exits.k.down_proj.weight [b, h], exits.k.up_proj.weight [h, b]).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/backend/backend.h"
#include "common/model/shortlist.h"

namespace splitspec {

struct ExitAdapter {
  int64_t after_layer = 0;  // 1..num_hidden_layers-1: exits after that many layers
  std::vector<float> norm;  // [hidden]
  std::vector<float> down;  // [bottleneck, hidden]
  std::vector<float> up;    // [hidden, bottleneck]
};

class EarlyExits {
 public:
  // Adapters of width `bottleneck` (fresh ones: exit_trainer.h's init_exits).
  EarlyExits(std::vector<ExitAdapter> adapters, int64_t bottleneck);
  // The exits stored in `model_dir`, or nullopt when it has none. Throws
  // splitspec::Error on corrupt or mismatched files.
  static std::optional<EarlyExits> load(const std::string& model_dir, const ModelConfig& config);
  void save(const std::string& model_dir) const;

  // "all" (every layer but the last) or a comma-separated list of layer counts.
  static std::vector<int64_t> parse_layers(const std::string& spec, const ModelConfig& config);

  const std::vector<ExitAdapter>& adapters() const { return adapters_; }
  std::vector<ExitAdapter>& adapters() { return adapters_; }
  int64_t bottleneck() const { return bottleneck_; }
  // The exits worth running when serving (early_exits.json "serve_layers",
  // chosen by measurement; empty: all of them).
  const std::vector<int64_t>& serve_layers() const { return serve_layers_; }
  // Retraining some exits keeps the others: adds `older`'s exits at layers
  // this set lacks (ordered by layer) and, when this set names none, its
  // serve_layers. Returns the layers added. Throws splitspec::Error when the
  // bottlenecks differ: one file holds one width.
  std::vector<int64_t> keep_missing_from(const EarlyExits& older);
  // Index of the exit after `after_layer` layers, or -1.
  int index_of(int64_t after_layer) const;
  size_t parameter_count() const;

  // Logits [m, vocab] of exit `i` for hidden rows [m, hidden] of its layer
  // (-inf outside the shortlist).
  Rows logits(const Backend& model, size_t i, RowsView hidden) const;
  // The same logits for the scored tokens only: [m, shortlist()], or
  // [m, vocab] without a shortlist; column j is token scored_token(j). What
  // a greedy exit needs, without spreading them over the vocabulary.
  Rows scores(const Backend& model, size_t i, RowsView hidden) const;
  // What exit `i`'s LM head reads for those rows: the adapted rows after the
  // final norm ([m, hidden]), the exit's stand-in for the target's final
  // hidden state (ReDrafter's head pre-drafts from it).
  Rows final_hidden(const Backend& model, size_t i, RowsView hidden) const;
  int32_t scored_token(int64_t column) const {
    return shortlist() > 0 ? frequent_tokens_[static_cast<size_t>(column)] : static_cast<int32_t>(column);
  }

  // Token ids, most frequent first, in the corpus the exits were trained on
  // (early_exits.json "frequent_tokens"; empty when the file predates them).
  const std::vector<int32_t>& frequent_tokens() const { return frequent_tokens_; }
  // Throws splitspec::Error on an id outside the vocabulary or a repeated id.
  // Drops any shortlist, which was drawn from the old ranking.
  void set_frequent_tokens(std::vector<int32_t> ids, int64_t vocab_size);

  // Serving: exits score only the `k` most frequent tokens. Reading the LM
  // head is most of an exit's cost, and a prediction misses only rare
  // tokens. Frequency, not id order: BPE numbers pieces in merge order, and
  // on the demo target the first 2048 ids hold only 58% of the tokens its
  // greedy outputs use, the 1024 most frequent 97%. k <= 0, k at or above
  // the ranked tokens, or no ranking: the whole vocabulary. The final layer
  // always scores the whole vocabulary.
  void set_shortlist(const Backend& model, int64_t k);
  // Tokens an exit scores; 0: all of them.
  int64_t shortlist() const { return shortlist_ ? shortlist_->size() : 0; }

 private:
  EarlyExits() = default;
  std::vector<ExitAdapter> adapters_;
  int64_t bottleneck_ = 0;
  std::vector<int64_t> serve_layers_;
  std::vector<int32_t> frequent_tokens_;
  // The first k of frequent_tokens_ (null: none), scored by their rows of
  // the LM head.
  std::shared_ptr<const Shortlist> shortlist_;
};

}  // namespace splitspec

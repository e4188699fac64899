#include "common/decoding/target_decoder.h"

#include <algorithm>
#include <thread>

#include "common/util/error.h"
#include "common/util/stopwatch.h"

namespace splitspec {

std::string finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kEos: return "eos";
    case FinishReason::kContext: return "context";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kNone: break;
  }
  return "";
}

namespace {

// Positions a fresh cache holds before its first reserve_rows(): the prompt
// and a few rounds, so a short generation never reallocates.
constexpr int64_t kInitialHeadroom = 128;

}  // namespace

TargetDecoder::TargetDecoder(const Backend& target, std::vector<int32_t> prompt, const GenerateOptions& options,
                             int32_t max_tree)
    : target_(target),
      options_(options),
      prompt_len_(static_cast<int64_t>(prompt.size())),
      context_(target.config().max_position_embeddings),
      budget_(std::clamp<int64_t>(options.max_new_tokens, 0, std::max<int64_t>(0, context_ - prompt_len_))),
      capacity_limit_(max_tree < 0 ? context_ : std::min<int64_t>(context_, prompt_len_ + budget_ + max_tree)),
      max_tree_(max_tree),
      cache_(target.new_kv(std::clamp<int64_t>(prompt_len_ + kInitialHeadroom, 1, std::max<int64_t>(1, capacity_limit_)))),
      seq_(std::move(prompt)) {
  const ModelConfig& c = target.config();
  options.sampling.validate();
  if (options.max_new_tokens < 0) throw Error("max-new-tokens must be >= 0");
  if (seq_.empty()) throw Error("prompt is empty: give at least one token (e.g. BOS)");
  if (prompt_len_ >= context_)
    throw Error("prompt of " + std::to_string(prompt_len_) + " tokens does not fit the model's context of " +
                std::to_string(context_) + " with room to generate");
  for (int32_t t : seq_)
    if (t < 0 || t >= c.vocab_size)
      throw Error("prompt token id " + std::to_string(t) + " outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  if (budget_ == 0) finish_ = options.max_new_tokens == 0 ? FinishReason::kLength : FinishReason::kContext;
}

size_t TargetDecoder::reserved_bytes() const {
  // A round carries the last token and a tree of at most max_tree nodes
  // (none given: the window bounds it); a prompt's forward saves no more
  // states than the window.
  const int64_t rows = 1 + std::max<int32_t>(0, max_tree_);
  return static_cast<size_t>(capacity_limit_) * target_.kv_bytes_per_position() + target_.recurrent_state_bytes(rows);
}

void TargetDecoder::reserve_rows(int64_t rows) {
  const int64_t need = cache_->size() + rows;
  if (need <= cache_->capacity()) return;
  // Doubling keeps the copies amortised; the limit keeps the cache within
  // what reserved_bytes() promised.
  cache_->reserve(std::max(need, std::min(capacity_limit_, 2 * cache_->capacity())));
}

int32_t TargetDecoder::room() const {
  // The round's forward holds the last committed token plus the tree.
  return static_cast<int32_t>(std::max<int64_t>(0, capacity_limit_ - static_cast<int64_t>(seq_.size())));
}

ForwardRequest TargetDecoder::pending_request(const DraftTree& tree, const RoundRequest& request) const {
  const int64_t past = cache_->size();
  const int64_t committed = static_cast<int64_t>(seq_.size());
  const int64_t pending = committed - past;  // the prompt in round one, else the last token
  ForwardRequest r;
  r.tokens.assign(seq_.begin() + past, seq_.end());
  r.tokens.insert(r.tokens.end(), tree.tokens.begin(), tree.tokens.end());
  std::vector<int64_t> rows{pending - 1};
  for (int32_t i = 0; i < tree.size(); ++i) rows.push_back(pending + i);
  r.logits_rows = std::move(rows);
  r.rollback_rows = tree.size() + 1;  // the root and every node: where an accepted path may end
  r.final_hidden = request.extras.hidden || request.extras.hidden_rows;
  if (request.extras.hidden_rows) {
    for (int64_t i = 0; i + 1 < pending; ++i) r.final_hidden_rows.push_back(i);
    const int64_t layers = target_.config().num_hidden_layers;
    for (int32_t l : request.extras.hidden_row_layers) {
      if (l < 1 || l > layers)
        throw Error("hidden rows: layer " + std::to_string(l) + " outside [1, " + std::to_string(layers) +
                    "] (the input of layer 0, the embedding, is not sent)");
      if (l < layers) r.hidden_layers.push_back(l - 1);
    }
  }
  r.argmax_only = options_.sampling.greedy() && request.extras.top_k <= 0;
  if (!tree.is_chain()) {
    // The pending tokens are a chain the tree hangs from.
    std::vector<int32_t> parents;
    for (int64_t i = 0; i < pending; ++i) parents.push_back(static_cast<int32_t>(i) - 1);
    const std::vector<int32_t> depths = tree.depths();
    for (int32_t i = 0; i < tree.size(); ++i)
      parents.push_back(static_cast<int32_t>(tree.parents[i] < 0 ? pending - 1 : pending + tree.parents[i]));
    for (int64_t i = 0; i < pending; ++i) r.positions.push_back(past + i);
    for (int32_t d : depths) r.positions.push_back(committed - 1 + d);
    r.mask = tree_attention_mask(parents, past);
  }
  if (request.tap && !request.tap_layers.empty()) {
    const Rng rng = round_rng();
    for (int64_t after : request.tap_layers) r.tap_layers.push_back(after - 1);
    r.on_layer = [index = *r.logits_rows, rng, &request](int64_t layer, RowsView hidden) {
      request.tap(layer + 1, hidden.select(index), rng);
    };
  }
  return r;
}

void TargetDecoder::check_round(const DraftTree& tree) const {
  if (finished()) throw Error("verify: the generation has finished");
  if (tree.size() > room())
    throw Error("draft of " + std::to_string(tree.size()) + " tokens does not fit the context (room for " +
                std::to_string(room()) + ")");
  tree.validate(target_.config().vocab_size, !options_.sampling.greedy());
}

RoundResult TargetDecoder::verify(const DraftTree& tree, const RoundRequest& request) {
  return std::move(verify_batch({{this, &tree, &request}})[0]);
}

std::vector<RoundResult> TargetDecoder::verify_batch(const std::vector<BatchRound>& rounds,
                                                    const std::vector<Prefill>& prefills,
                                                    const ForwardEmulation& emulation) {
  if (rounds.empty() && prefills.empty()) return {};
  const Backend& target = rounds.empty() ? prefills[0].decoder->target_ : rounds[0].decoder->target_;
  std::vector<ForwardRequest> requests;
  std::vector<int64_t> pasts;
  requests.reserve(rounds.size());
  for (const BatchRound& b : rounds) {
    if (&b.decoder->target_ != &target) throw Error("verify: a batch of rounds for different targets");
    b.decoder->check_round(*b.tree);
    requests.push_back(b.decoder->pending_request(*b.tree, *b.request));
    pasts.push_back(b.decoder->cache_->size());
  }
  for (const Prefill& p : prefills) {
    TargetDecoder& d = *p.decoder;
    if (&d.target_ != &target) throw Error("verify: a batch of rounds for different targets");
    if (p.tokens < 1 || p.tokens > d.prefill_left())
      throw Error("prefill of " + std::to_string(p.tokens) + " tokens where " + std::to_string(d.prefill_left()) +
                  " are left");
    ForwardRequest r;
    r.tokens.assign(d.seq_.begin() + d.cache_->size(), d.seq_.begin() + d.cache_->size() + p.tokens);
    r.logits_rows = std::vector<int64_t>{};
    requests.push_back(std::move(r));
  }
  std::vector<Backend::Item> items;
  for (size_t i = 0; i < rounds.size(); ++i) items.push_back({&requests[i], rounds[i].decoder->cache_.get()});
  for (size_t i = 0; i < prefills.size(); ++i)
    items.push_back({&requests[rounds.size() + i], prefills[i].decoder->cache_.get()});
  for (size_t i = 0; i < items.size(); ++i) {
    TargetDecoder& d = i < rounds.size() ? *rounds[i].decoder : *prefills[i - rounds.size()].decoder;
    d.reserve_rows(static_cast<int64_t>(requests[i].tokens.size()));
  }
  SteadyClock::time_point tf;
  std::chrono::duration<double, std::milli> modeled{0};
  if (emulation.enabled()) {
    int64_t rows = 0;
    for (const ForwardRequest& r : requests) rows += static_cast<int64_t>(r.tokens.size());
    modeled = std::chrono::duration<double, std::milli>(emulation.modeled_ms(rows));
    // The first sequence's hook runs first after each layer (forward_batch
    // is layer-major), before any tap of that layer; it paces every layer
    // and passes on the taps.
    const double layers = static_cast<double>(target.config().num_hidden_layers);
    requests[0].on_layer = [&tf, &modeled, layers, taps = std::move(requests[0].tap_layers),
                            inner = std::move(requests[0].on_layer)](int64_t layer, RowsView hidden) {
      std::this_thread::sleep_until(tf + std::chrono::duration_cast<SteadyClock::duration>(
                                             modeled * (static_cast<double>(layer + 1) / layers)));
      if (inner && (taps.empty() || std::find(taps.begin(), taps.end(), layer) != taps.end())) inner(layer, hidden);
    };
    requests[0].tap_layers.clear();
  }
  tf = SteadyClock::now();
  // forward_batch commits every cache or none.
  const std::vector<ForwardResult> outs = target.forward_batch(items);
  if (emulation.enabled()) std::this_thread::sleep_until(tf + std::chrono::duration_cast<SteadyClock::duration>(modeled));
  const double forward_ms = ms_since(tf);
  // Every round is judged before any commits, so one that throws leaves all
  // the batch's decoders as they were: a caller that retries the rounds one
  // by one never verifies a committed round twice.
  std::vector<RoundResult> results(rounds.size());
  try {
    for (size_t i = 0; i < rounds.size(); ++i)
      results[i] = rounds[i].decoder->judge_round(*rounds[i].tree, rounds[i].request->extras, outs[i]);
  } catch (...) {
    for (const Backend::Item& item : items)
      item.kv->truncate(item.kv->size() - static_cast<int64_t>(item.request->tokens.size()));
    throw;
  }
  for (size_t i = 0; i < rounds.size(); ++i) {
    TargetDecoder& d = *rounds[i].decoder;
    const auto tv = SteadyClock::now();
    d.forwards_ += 1;
    if (rounds[i].request->extras.hidden_rows) results[i].extras.hidden_rows_from = pasts[i];
    d.apply_round(results[i], pasts[i]);
    d.add_kv_rows(results[i], pasts[i], rounds[i].request->extras);
    results[i].forward_ms = forward_ms;
    results[i].verify_ms += ms_since(tv);
  }
  return results;
}

RoundResult TargetDecoder::judge_round(const DraftTree& tree, const ExtrasRequest& extras,
                                       const ForwardResult& out) const {
  RoundResult r;
  const auto tv = SteadyClock::now();
  Rng rng = round_rng();
  if (!out.argmax.empty())
    r.verdict = verify_tree_greedy(tree, target_.config().vocab_size, [&](int64_t row) { return out.argmax.at(row); });
  else
    r.verdict = verify_tree(tree, out.logits, options_.sampling, rng);
  add_extras(r, out, extras);
  r.verify_ms = ms_since(tv);
  return r;
}

void TargetDecoder::apply_round(RoundResult& r, int64_t past) {
  // Keep the pending tokens and the accepted path: the cache again holds
  // every committed token but the new last one.
  const int64_t pending = static_cast<int64_t>(seq_.size()) - past;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < pending; ++i) rows.push_back(i);
  for (int32_t node : r.verdict.path) rows.push_back(pending + node);
  cache_->keep(past, rows);
  commit(r);
}

void TargetDecoder::add_extras(RoundResult& r, const ForwardResult& out, const ExtrasRequest& want) const {
  const Verdict& v = r.verdict;
  if (want.top_k > 0) {
    std::vector<int64_t> rows;
    for (size_t i = 0; i < v.tokens.size(); ++i) rows.push_back(verdict_row(v, i));
    r.extras.top_k = top_k_of(out.logits.select(rows), want.top_k);
  }
  if (want.hidden && !v.tokens.empty()) {
    const float* row = out.final_hidden.row(verdict_row(v, v.tokens.size() - 1));
    r.extras.hidden.assign(row, row + out.final_hidden.cols());
  }
  if (want.hidden_rows) {
    const int64_t pending = out.final_hidden_rows.rows() + 1, H = out.final_hidden.cols();
    const int64_t layers = target_.config().num_hidden_layers;
    std::vector<float>& rows = r.extras.hidden_rows;
    rows.clear();
    // Forward row `at`: the final hidden state (`normed`), or the layers' inputs.
    auto add = [&](int64_t at, const float* normed) {
      if (want.hidden_row_layers.empty()) rows.insert(rows.end(), normed, normed + H);
      for (int32_t l : want.hidden_row_layers) {
        const float* x = l == layers ? normed : out.hidden.at(l - 1).row(at);
        rows.insert(rows.end(), x, x + H);
      }
    };
    for (int64_t i = 0; i + 1 < pending; ++i) add(i, out.final_hidden_rows.row(i));
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      const int64_t row = verdict_row(v, i);  // of the logits rows: the root's, then the nodes'
      add(row == 0 ? pending - 1 : pending + row - 1, out.final_hidden.row(row));
    }
  }
}

void TargetDecoder::add_kv_rows(RoundResult& r, int64_t past, const ExtrasRequest& want) const {
  if (want.kv_row_layers.empty()) return;
  const ModelConfig& c = target_.config();
  const int64_t n = cache_->size() - past;
  std::vector<std::vector<float>> keys, values;
  int64_t width = 0;  // one position's floats, every layer's keys and values
  for (int32_t l : want.kv_row_layers) {
    if (l < 0 || l >= c.num_hidden_layers || c.layer_is_recurrent(l))
      throw Error("kv rows: layer " + std::to_string(l) + " is not an attention layer of the target");
    const int64_t w = c.layer_kv_heads(l) * c.layer_head_dim(l);
    keys.emplace_back(static_cast<size_t>(n * w));
    values.emplace_back(static_cast<size_t>(n * w));
    if (n > 0) cache_->read_rows(l, past, n, keys.back().data(), values.back().data());
    width += 2 * w;
  }
  std::vector<float>& rows = r.extras.kv_rows;
  rows.clear();
  rows.reserve(static_cast<size_t>(n * width));
  for (int64_t i = 0; i < n; ++i)
    for (size_t j = 0; j < keys.size(); ++j) {
      const int64_t w = static_cast<int64_t>(keys[j].size()) / std::max<int64_t>(n, 1);
      rows.insert(rows.end(), keys[j].begin() + i * w, keys[j].begin() + (i + 1) * w);
      rows.insert(rows.end(), values[j].begin() + i * w, values[j].begin() + (i + 1) * w);
    }
  r.extras.kv_rows_from = past;
}

void TargetDecoder::commit(RoundResult& r) {
  std::vector<int32_t>& tokens = r.verdict.tokens;
  size_t kept = 0;
  while (kept < tokens.size() && !finished()) {
    const int32_t tok = tokens[kept++];
    seq_.push_back(tok);
    if (is_end_of_generation(target_.config(), tok) && !options_.ignore_eos)
      finish_ = FinishReason::kEos;
    else if (generated() >= budget_)
      finish_ = budget_ == options_.max_new_tokens ? FinishReason::kLength : FinishReason::kContext;
  }
  tokens.resize(kept);
  r.finish = finish_;
}

}  // namespace splitspec

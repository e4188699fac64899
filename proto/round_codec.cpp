#include "proto/round_codec.h"

#include <cmath>
#include <cstring>
#include <unordered_set>

#include "common/kernels/kernels.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

// A drafted node's q on the wire: sparse, or one-hot for a node chosen
// deterministically.
v1::TokenDistribution wire_q(const DraftTree& tree, int32_t i) {
  v1::TokenDistribution w;
  const Distribution* q = tree.q_of(i);
  if (!q) {
    w.add_ids(tree.tokens[i]);
    w.add_probs(1.0f);
    return w;
  }
  size_t support = 0;
  for (float p : *q) support += p > 0.0f;
  // A sparse entry costs about 7 bytes (a varint id and an fp32), a dense one 4.
  if (support * 7 > q->size() * 4) {
    w.set_dense(reinterpret_cast<const char*>(q->data()), q->size() * sizeof(float));
    return w;
  }
  for (size_t t = 0; t < q->size(); ++t)
    if ((*q)[t] > 0.0f) {
      w.add_ids(static_cast<int32_t>(t));
      w.add_probs((*q)[t]);
    }
  return w;
}

// A wire q as the dense distribution verification needs (empty for a one-hot
// q at the node's own token: a deterministic choice), or an error naming what
// is wrong with it.
Distribution dense_q(const v1::TokenDistribution& w, int64_t vocab, int32_t index, int32_t token) {
  if (w.ids_size() == 1 && w.probs_size() == 1 && w.ids(0) == token && w.probs(0) == 1.0f) return {};
  const std::string at = "draft token " + std::to_string(index) + ": q ";
  if (!w.dense().empty()) {
    if (w.ids_size() != 0 || w.probs_size() != 0) throw Error(at + "is both dense and sparse");
    if (w.dense().size() != static_cast<size_t>(vocab) * sizeof(float))
      throw Error(at + "is dense with " + std::to_string(w.dense().size()) + " bytes, not 4 for each of " +
                  std::to_string(vocab) + " tokens");
    Distribution q(vocab);
    std::memcpy(q.data(), w.dense().data(), w.dense().size());
    double total = 0.0;
    for (int64_t id = 0; id < vocab; ++id) {
      const float p = q[id];
      if (!std::isfinite(p) || p < 0.0f || p > 1.0f)
        throw Error(at + "has probability " + std::to_string(p) + " outside [0, 1] at token " + std::to_string(id));
      total += p;
    }
    if (std::abs(total - 1.0) > 1e-3) throw Error(at + "sums to " + std::to_string(total) + ", not 1");
    return q;
  }
  if (w.ids_size() != w.probs_size())
    throw Error(at + "has " + std::to_string(w.ids_size()) + " ids but " + std::to_string(w.probs_size()) + " probabilities");
  Distribution q(vocab, 0.0f);
  std::unordered_set<int32_t> seen;
  double total = 0.0;
  for (int i = 0; i < w.ids_size(); ++i) {
    const int32_t id = w.ids(i);
    const float p = w.probs(i);
    if (id < 0 || id >= vocab) throw Error(at + "names token " + std::to_string(id) + " outside the vocabulary");
    if (!seen.insert(id).second) throw Error(at + "names token " + std::to_string(id) + " twice");
    if (!std::isfinite(p) || p < 0.0f || p > 1.0f) throw Error(at + "has probability " + std::to_string(p) + " outside [0, 1]");
    q[id] = p;
    total += p;
  }
  if (std::abs(total - 1.0) > 1e-3) throw Error(at + "sums to " + std::to_string(total) + ", not 1");
  return q;
}

}  // namespace

void encode_draft(const DraftTree& tree, bool sampled, v1::Draft& out) {
  out.mutable_tokens()->Add(tree.tokens.begin(), tree.tokens.end());
  if (!tree.is_chain()) out.mutable_parents()->Add(tree.parents.begin(), tree.parents.end());
  if (sampled)
    for (int32_t i = 0; i < tree.size(); ++i) *out.add_q() = wire_q(tree, i);
}

DraftTree decode_draft(const v1::Draft& d, int64_t vocab, bool greedy) {
  if (d.parents_size() != 0 && d.parents_size() != d.tokens_size())
    throw Error("Draft has " + std::to_string(d.parents_size()) + " parents for " + std::to_string(d.tokens_size()) +
                " tokens");
  if (!greedy && d.q_size() != d.tokens_size())
    throw Error("sampling needs the q of every draft token: got " + std::to_string(d.q_size()) + " for " +
                std::to_string(d.tokens_size()) + " tokens");
  if (greedy && d.q_size() != 0 && d.q_size() != d.tokens_size())
    throw Error("Draft has " + std::to_string(d.q_size()) + " q for " + std::to_string(d.tokens_size()) + " tokens");
  DraftTree tree;
  tree.tokens.assign(d.tokens().begin(), d.tokens().end());
  if (d.parents_size())
    tree.parents.assign(d.parents().begin(), d.parents().end());
  else
    for (int32_t i = 0; i < tree.size(); ++i) tree.parents.push_back(i - 1);
  // Greedy verification never reads q, but malformed q is still malformed.
  for (int i = 0; i < d.q_size(); ++i) {
    Distribution q = dense_q(d.q(i), vocab, i, tree.tokens[i]);
    if (!greedy) tree.q.push_back(std::move(q));
  }
  tree.validate(vocab, !greedy);
  return tree;
}

void encode_verdict(const Verdict& v, v1::RoundVerdict& out) {
  out.set_accepted(v.accepted);
  out.mutable_tokens()->Add(v.tokens.begin(), v.tokens.end());
  out.mutable_path()->Add(v.path.begin(), v.path.end());
}

std::string decode_verdict(const v1::RoundVerdict& v, const DraftTree& tree, int64_t vocab, Verdict& out) {
  if (v.tokens_size() == 0) return "no tokens";
  // The accepted drafts, then the target's token; a final verdict that ends
  // the generation stops at its last token (EOS, or the length reached).
  const bool ends = v.final() && v.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
  if (v.accepted() < 0 || v.tokens_size() > v.accepted() + 1 || (!ends && v.tokens_size() != v.accepted() + 1))
    return std::to_string(v.tokens_size()) + " tokens for " + std::to_string(v.accepted()) + " accepted";
  const int32_t depth = tree.max_depth();
  if (v.accepted() > depth)
    return "accepts " + std::to_string(v.accepted()) + " of a " +
           (tree.is_chain() ? std::to_string(tree.size()) + "-token draft"
                            : std::to_string(tree.size()) + "-node tree of depth " + std::to_string(depth));
  for (int32_t id : v.tokens())
    if (id < 0 || id >= vocab) return "token " + std::to_string(id) + " outside the vocabulary";
  out.accepted = v.accepted();
  out.tokens.assign(v.tokens().begin(), v.tokens().end());
  out.path.assign(v.path().begin(), v.path().end());
  if (out.path.empty() && tree.is_chain())
    for (int32_t i = 0; i < v.accepted(); ++i) out.path.push_back(i);
  if (static_cast<int32_t>(out.path.size()) != v.accepted())
    return "a path of " + std::to_string(out.path.size()) + " nodes for " + std::to_string(v.accepted()) + " accepted";
  int32_t parent = -1;
  for (int32_t node : out.path) {
    if (node < 0 || node >= tree.size() || tree.parents[node] != parent) return "a path that is not a branch of the tree";
    parent = node;
  }
  return "";
}

void encode_top_k(const std::vector<TopK>& top_k, v1::RoundVerdict& out) {
  for (const TopK& k : top_k) {
    v1::TokenDistribution* w = out.add_top_k();
    w->mutable_ids()->Add(k.ids.begin(), k.ids.end());
    w->mutable_probs()->Add(k.probs.begin(), k.probs.end());
  }
}

std::string decode_top_k(const v1::RoundVerdict& v, int64_t vocab, std::vector<TopK>& out) {
  out.clear();
  for (const v1::TokenDistribution& k : v.top_k()) {
    TopK t{std::vector<int32_t>(k.ids().begin(), k.ids().end()), std::vector<float>(k.probs().begin(), k.probs().end())};
    if (t.ids.size() != t.probs.size()) return "an entry with " + std::to_string(t.ids.size()) + " ids and " +
                                               std::to_string(t.probs.size()) + " probabilities";
    for (size_t i = 0; i < t.ids.size(); ++i)
      if (t.ids[i] < 0 || t.ids[i] >= vocab || !(t.probs[i] >= 0.0f && t.probs[i] <= 1.0f))
        return "token " + std::to_string(t.ids[i]) + " with probability " + std::to_string(t.probs[i]);
    out.push_back(std::move(t));
  }
  return "";
}

namespace {

void to_half(const std::vector<float>& values, std::string& out) {
  std::vector<uint16_t> half(values.size());
  kernels::float_to_half(values.data(), static_cast<int64_t>(half.size()), half.data());
  out.assign(reinterpret_cast<const char*>(half.data()), half.size() * sizeof(uint16_t));
}

// Half values into `out`: whole rows of `row` values (0: any count); empty,
// or what is wrong.
std::string from_half(const std::string& bytes, int64_t row, bool one_row, std::vector<float>& out) {
  out.clear();
  if (bytes.empty()) return "";
  const size_t row_bytes = static_cast<size_t>(row) * sizeof(uint16_t);
  if (bytes.size() % sizeof(uint16_t) != 0 ||
      (row > 0 && (one_row ? bytes.size() != row_bytes : bytes.size() % row_bytes != 0)))
    return std::to_string(bytes.size()) + " bytes for a hidden size of " + std::to_string(row);
  std::vector<uint16_t> half(bytes.size() / sizeof(uint16_t));
  std::memcpy(half.data(), bytes.data(), bytes.size());
  out.resize(half.size());
  kernels::half_to_float(half.data(), static_cast<int64_t>(half.size()), out.data());
  return "";
}

}  // namespace

void encode_hidden(const std::vector<float>& hidden, v1::RoundVerdict& out) {
  if (!hidden.empty()) to_half(hidden, *out.mutable_hidden_state());
}

std::string decode_hidden(const std::string& bytes, int64_t hidden_size, std::vector<float>& out) {
  return from_half(bytes, hidden_size, true, out);
}

void encode_hidden_rows(const std::vector<float>& rows, v1::RoundVerdict& out) {
  if (!rows.empty()) to_half(rows, *out.mutable_hidden_rows());
}

std::string decode_hidden_rows(const std::string& bytes, int64_t hidden_size, std::vector<float>& out) {
  return from_half(bytes, hidden_size, false, out);
}

}  // namespace splitspec

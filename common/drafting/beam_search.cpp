#include "common/drafting/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/drafting/recurrent_head.h"
#include "common/kernels/kernels.h"
#include "common/util/error.h"

namespace splitspec {

namespace {

struct Candidate {
  float score;
  int32_t beam;
  int32_t token;
};

bool better(const Candidate& a, const Candidate& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.beam != b.beam) return a.beam < b.beam;
  return a.token < b.token;
}

// Appends row's `k` best tokens as candidates of `beam` (scored from `base`).
void best_of_row(const float* row, int64_t vocab, int32_t k, int32_t beam, float base, std::vector<Candidate>& out) {
  float max = row[0];
  for (int64_t i = 1; i < vocab; ++i) max = std::max(max, row[i]);
  const float lse = max + std::log(kernels::sum_exp(row, vocab, max));
  const size_t from = out.size();
  for (int64_t t = 0; t < vocab; ++t) {
    float score = base + row[t] - lse;
    // A NaN would break the ordering the sort relies on.
    if (!std::isfinite(score)) score = -std::numeric_limits<float>::infinity();
    const Candidate c{score, beam, static_cast<int32_t>(t)};
    if (out.size() - from == static_cast<size_t>(k)) {
      if (!better(c, out.back())) continue;
      out.pop_back();
    }
    auto at = std::upper_bound(out.begin() + static_cast<std::ptrdiff_t>(from), out.end(), c, better);
    out.insert(at, c);
  }
}

}  // namespace

Beams beam_search(const RecurrentHead& head, const float* h, int32_t token, int32_t width, int32_t length) {
  if (width < 1 || length < 1) throw Error("beam search: width and length must be positive");
  const int64_t E = head.config().embed_dim, V = head.config().vocab_size;
  std::vector<float> states(static_cast<size_t>(width * E)), next(states.size()), logits(static_cast<size_t>(width * V));
  std::vector<float> scores(1, 0.0f);
  RecurrentHead::Scratch scratch;
  head.advance(states.data(), &token, 1, true, scratch);
  // parent[d][j]: the beam at depth d-1 that beam j extends at depth d.
  std::vector<std::vector<int32_t>> parent(length), tok(length);
  std::vector<Candidate> cand;
  int32_t live = 1;
  for (int32_t d = 0; d < length; ++d) {
    head.logits(h, states.data(), live, logits.data(), scratch);
    cand.clear();
    for (int32_t b = 0; b < live; ++b) best_of_row(logits.data() + b * V, V, width, b, scores[b], cand);
    std::sort(cand.begin(), cand.end(), better);
    const int32_t n = std::min<int32_t>(width, static_cast<int32_t>(cand.size()));
    scores.resize(n);
    for (int32_t j = 0; j < n; ++j) {
      parent[d].push_back(cand[j].beam);
      tok[d].push_back(cand[j].token);
      scores[j] = cand[j].score;
    }
    live = n;
    if (d + 1 == length) break;
    for (int32_t j = 0; j < n; ++j)
      std::copy_n(states.data() + parent[d][j] * E, E, next.data() + j * E);
    head.advance(next.data(), tok[d].data(), n, false, scratch);
    std::swap(states, next);
  }
  Beams out;
  for (int32_t j = 0; j < live; ++j) {
    std::vector<int32_t> beam(length);
    for (int32_t d = length - 1, b = j; d >= 0; --d) {
      beam[d] = tok[d][b];
      b = parent[d][b];
    }
    out.tokens.push_back(std::move(beam));
    out.log_probs.push_back(scores[j]);
  }
  return out;
}

DraftTree beams_to_tree(const std::vector<std::vector<int32_t>>& beams) {
  DraftTree t;
  for (const std::vector<int32_t>& beam : beams) {
    int32_t at = -1;
    for (int32_t token : beam) {
      int32_t found = -1;
      // A node's children follow it, so the search starts past it.
      for (int32_t i = at + 1; i < t.size(); ++i)
        if (t.parents[i] == at && t.tokens[i] == token) {
          found = i;
          break;
        }
      if (found < 0) {
        t.tokens.push_back(token);
        t.parents.push_back(at);
        found = t.size() - 1;
      }
      at = found;
    }
  }
  return t;
}

}  // namespace splitspec

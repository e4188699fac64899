#include "common/model/shortlist.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/kernels/kernels.h"
#include "common/kernels/linear.h"
#include "common/util/error.h"

namespace splitspec {

std::vector<int32_t> tokens_by_frequency(const std::vector<int32_t>& tokens, int64_t vocab_size, int64_t limit) {
  std::vector<int64_t> count(static_cast<size_t>(vocab_size), 0);
  for (int32_t t : tokens)
    if (t >= 0 && t < vocab_size) ++count[static_cast<size_t>(t)];
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < vocab_size; ++i)
    if (count[static_cast<size_t>(i)] > 0) ids.push_back(i);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return count[static_cast<size_t>(a)] > count[static_cast<size_t>(b)]; });
  if (static_cast<int64_t>(ids.size()) > limit) ids.resize(static_cast<size_t>(limit));
  return ids;
}

Shortlist::Shortlist(std::vector<int32_t> tokens, const Rows& rows)
    : tokens_(std::move(tokens)), hidden_(rows.cols()), head_(static_cast<size_t>(rows.size())) {
  if (rows.rows() != size()) throw Error("shortlist: " + std::to_string(size()) + " tokens, " + std::to_string(rows.rows()) + " rows");
  kernels::float_to_half(rows.data(), rows.size(), head_.data());
}

Rows Shortlist::scores(RowsView normed) const {
  Rows out(normed.rows, size());
  kernels::linear(normed.data, normed.rows, MatrixRef{WType::F16, head_.data(), size(), hidden_}, out.data());
  return out;
}

Rows Shortlist::logits(RowsView normed, int64_t vocab) const {
  const Rows scored = scores(normed);
  Rows out(normed.rows, vocab);
  std::fill(out.data(), out.data() + out.size(), -std::numeric_limits<float>::infinity());
  for (int64_t r = 0; r < normed.rows; ++r)
    for (int64_t j = 0; j < size(); ++j) out.row(r)[tokens_[static_cast<size_t>(j)]] = scored.row(r)[j];
  return out;
}

}  // namespace splitspec

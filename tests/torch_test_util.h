#pragma once
// The tests' helpers that use LibTorch: tensors as logits and hidden rows,
// and a noisy copy of a model. Only the tests that link the trainer
// include this; the rest take test_util.h alone.
#include <ATen/ATen.h>

#include "common/train/model_weights.h"
#include "tests/test_util.h"

namespace splitspec::test {

// Tests build logits and hidden rows as tensors: views of a contiguous float
// tensor [rows, cols] (or [cols], one row) as the engine reads them, and the
// decoding functions on tensor rows.
inline RowsView view(const at::Tensor& t) {
  EXPECT_TRUE(t.is_contiguous() && t.scalar_type() == at::kFloat);
  return t.dim() == 1 ? RowsView{t.data_ptr<float>(), 1, t.size(0)}
                      : RowsView{t.data_ptr<float>(), t.size(0), t.size(1)};
}
inline at::Tensor T(RowsView rows) { return to_tensor(rows); }
using splitspec::filtered_distribution;
using splitspec::greedy_token;
using splitspec::next_token;
using splitspec::sample;
using splitspec::verify_tree;
inline int32_t greedy_token(const at::Tensor& row) {
  const at::Tensor r = row.to(at::kFloat).contiguous();
  return splitspec::greedy_token(r.data_ptr<float>(), r.numel());
}
inline Distribution filtered_distribution(const at::Tensor& row, const SamplingParams& p) {
  const at::Tensor r = row.to(at::kFloat).contiguous();
  return splitspec::filtered_distribution(r.data_ptr<float>(), r.numel(), p);
}
inline Sample sample(const at::Tensor& row, const SamplingParams& p, Rng& rng) {
  const at::Tensor r = row.to(at::kFloat).contiguous();
  return splitspec::sample(r.data_ptr<float>(), r.numel(), p, rng);
}
inline int32_t next_token(const at::Tensor& row, const SamplingParams& p, Rng& rng) {
  const at::Tensor r = row.to(at::kFloat).contiguous();
  return splitspec::next_token(r.data_ptr<float>(), r.numel(), p, rng);
}
inline Verdict verify_tree(const DraftTree& tree, const at::Tensor& logits, const SamplingParams& p, Rng& rng) {
  const at::Tensor l = logits.to(at::kFloat).contiguous();
  return splitspec::verify_tree(tree, view(l), p, rng);
}

// A draft that agrees with `target` often but not always: its weights with
// Gaussian noise of standard deviation `noise` added.
std::shared_ptr<Model> noisy_copy(const Model& target, double noise, uint64_t seed);

}  // namespace splitspec::test

#pragma once
// A row-major float matrix [rows, cols]: what a forward returns (logits,
// hidden states) and what decoding reads. Plain memory, so inference never
// loads LibTorch (its libraries were most of a process's start-up and of its
// resident memory; docs/weights.md).
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace splitspec {

class Rows;

// Rows of a matrix someone else owns, valid while it lives.
struct RowsView {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  const float* row(int64_t i) const { return data + i * cols; }
  RowsView slice(int64_t first, int64_t count) const { return {row(first), count, cols}; }
  // A copy of rows `which`, in that order.
  Rows select(const std::vector<int64_t>& which) const;
};

class Rows {
 public:
  Rows() = default;
  // Uninitialised: the forward writes every element, and an untouched large
  // buffer costs no resident memory.
  Rows(int64_t rows, int64_t cols) : rows_(rows), cols_(cols), data_(new float[rows * cols]) {}
  Rows(const Rows& o) : Rows(o.rows_, o.cols_) { copy_from(o.data_.get()); }
  Rows& operator=(const Rows& o) {
    if (this != &o) *this = Rows(o);
    return *this;
  }
  Rows(Rows&&) = default;
  Rows& operator=(Rows&&) = default;
  static Rows copy_of(RowsView v) {
    Rows r(v.rows, v.cols);
    r.copy_from(v.data);
    return r;
  }

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t size() const { return rows_ * cols_; }
  bool empty() const { return rows_ == 0; }
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  float* row(int64_t i) { return data_.get() + i * cols_; }
  const float* row(int64_t i) const { return data_.get() + i * cols_; }
  RowsView view() const { return {data_.get(), rows_, cols_}; }
  operator RowsView() const { return view(); }
  Rows select(const std::vector<int64_t>& which) const { return view().select(which); }
  Rows slice(int64_t first, int64_t count) const { return copy_of(view().slice(first, count)); }

 private:
  void copy_from(const float* src) {
    if (size() > 0) std::memcpy(data_.get(), src, size() * sizeof(float));
  }
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::unique_ptr<float[]> data_;
};

inline Rows RowsView::select(const std::vector<int64_t>& which) const {
  Rows r(static_cast<int64_t>(which.size()), cols);
  for (size_t i = 0; i < which.size(); ++i)
    std::memcpy(r.row(static_cast<int64_t>(i)), row(which[i]), cols * sizeof(float));
  return r;
}

}  // namespace splitspec

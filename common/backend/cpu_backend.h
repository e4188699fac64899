#pragma once
// The CPU engine (common/model) as a backend: the forward, its KV caches in
// host memory and its weights in memory or streamed from disk, bit for bit
// what Model computes.
#include <memory>
#include <mutex>
#include <string>

#include "common/backend/backend.h"

namespace splitspec {

// Version of the CPU kernels' arithmetic (Numerics::kernels): raise it with
// any change that moves a result bit of the forward.
inline constexpr const char* kCpuKernelsVersion = "1";

// A KV store in host memory: a KVCache.
class CpuKV final : public KVStore {
 public:
  explicit CpuKV(KVCache cache) : cache_(std::move(cache)) {}
  int64_t size() const override { return cache_.size(); }
  int64_t capacity() const override { return cache_.capacity(); }
  void reserve(int64_t n) override { cache_.reserve(n); }
  void truncate(int64_t n) override { cache_.truncate(n); }
  void keep(int64_t base, const std::vector<int64_t>& rows) override { cache_.keep(base, rows); }
  size_t bytes() const override { return cache_.bytes(); }
  void read_rows(int64_t layer, int64_t from, int64_t n, float* k, float* v) const override {
    cache_.read_rows(layer, from, n, k, v);
  }
  KVCache& cache() { return cache_; }

 private:
  KVCache cache_;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(std::shared_ptr<const Model> model);
  // A view of a model its caller keeps alive.
  explicit CpuBackend(const Model& model);

  const Model& model() const { return model_; }

  const ModelConfig& config() const override { return model_.config(); }
  const std::string& name() const override { return model_.name(); }
  // The digest is read once (it reads every weight) and kept.
  Numerics numerics() const override;
  std::string device() const override;
  WType weight_type() const override { return model_.weight_type(); }
  KVType kv_type() const override { return model_.kv_type(); }
  size_t weight_bytes() const override { return model_.weight_bytes(); }
  std::unique_ptr<KVStore> new_kv(int64_t capacity) const override;
  size_t kv_bytes_per_position() const override;
  size_t recurrent_state_bytes(int64_t rows) const override;
  std::vector<ForwardResult> forward_batch(const std::vector<Item>& items) const override;
  const float* final_norm() const override { return model_.final_norm(); }
  Rows head_rows(const std::vector<int64_t>& ids) const override { return model_.head_rows(ids); }
  Rows head_logits(RowsView hidden) const override { return model_.head_logits(hidden); }

 private:
  std::shared_ptr<const Model> owner_;
  const Model& model_;
  mutable std::once_flag digest_once_;
  mutable std::string digest_;
};

// The weights of a CPU backend's target streamed from disk; null for any
// other backend or target.
const StreamedWeights* streamed_weights(const Backend& backend);

// The CPU kernels' arithmetic family on this machine (Numerics::arch):
// "x86" (the AVX2 and AVX-512 bodies give one result), "neon" or "scalar".
std::string cpu_arch();

}  // namespace splitspec

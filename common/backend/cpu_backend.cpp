#include "common/backend/cpu_backend.h"

#include "common/kernels/kernels.h"
#include "common/kernels/threads.h"
#include "common/util/error.h"

namespace splitspec {

std::string cpu_arch() {
  switch (kernels::isa_in_use()) {
    case kernels::Isa::kAvx2:
    case kernels::Isa::kAvx512: return "x86";
    case kernels::Isa::kNeon: return "neon";
    case kernels::Isa::kScalar: break;
  }
  return "scalar";
}

const StreamedWeights* streamed_weights(const Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return cpu ? cpu->model().stream() : nullptr;
}

CpuBackend::CpuBackend(std::shared_ptr<const Model> model) : owner_(std::move(model)), model_(*owner_) {}

CpuBackend::CpuBackend(const Model& model) : model_(model) {}

Numerics CpuBackend::numerics() const {
  std::call_once(digest_once_, [&] { digest_ = model_.weights_digest(); });
  return {"cpu", cpu_arch(), kCpuKernelsVersion, wtype_name(model_.weight_type()), digest_,
          kv_type_name(model_.kv_type())};
}

std::string CpuBackend::device() const {
  return std::string("cpu (") + kernels::isa() + ", " + std::to_string(compute_threads()) + " threads)";
}

std::unique_ptr<KVStore> CpuBackend::new_kv(int64_t capacity) const {
  return std::make_unique<CpuKV>(model_.new_cache(capacity));
}

size_t CpuBackend::kv_bytes_per_position() const {
  return KVCache::bytes_per_position(model_.config(), model_.kv_type());
}

size_t CpuBackend::recurrent_state_bytes(int64_t rows) const {
  return KVCache::state_bytes(model_.config(), model_.state_window(), rows);
}

std::vector<ForwardResult> CpuBackend::forward_batch(const std::vector<Item>& items) const {
  std::vector<Model::BatchItem> batch;
  batch.reserve(items.size());
  for (const Item& item : items) {
    auto* kv = dynamic_cast<CpuKV*>(item.kv);
    if (!kv) throw Error("forward: a KV store made by another backend than the CPU's");
    batch.push_back({item.request, &kv->cache()});
  }
  return model_.forward_batch(batch);
}

}  // namespace splitspec

// The CUDA backend (cuda_backend.h): weights uploaded at load, KV stores in
// device memory, and the forward as one stream of kernels (device.h), with
// the early exits' rows copied to the host while later layers run.
#include "common/backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "common/backend/cuda/device.h"
#include "common/backend/cuda/device_weights.h"
#include "common/kernels/kernels.h"
#include "common/kernels/quant.h"
#include "common/util/error.h"
#include "common/model/weight_names.h"
#include "common/model/weight_set.h"

namespace splitspec::cuda {

namespace {

void set_device(int device) { SPLITSPEC_CUDA(cudaSetDevice(device)); }

// 16-byte-aligned pieces of one host-to-device copy.
class Staging {
 public:
  template <typename T>
  size_t add(const T* data, size_t count) {
    const size_t at = (bytes_.size() + 15) / 16 * 16;
    bytes_.resize(at + count * sizeof(T));
    if (count) std::memcpy(bytes_.data() + at, data, count * sizeof(T));
    return at;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  void clear() { bytes_.clear(); }

 private:
  std::vector<uint8_t> bytes_;
};

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

std::string device_name(int device) {
  cudaDeviceProp p{};
  SPLITSPEC_CUDA(cudaGetDeviceProperties(&p, device));
  return std::string(p.name) + " (sm_" + std::to_string(p.major * 10 + p.minor) + ", " + gib(p.totalGlobalMem) + ")";
}

// Why this process cannot use GPU `index`, or empty.
std::string unusable(int index) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    // Without a driver the runtime says the driver is too old.
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
      return std::string("no NVIDIA driver or GPU here (") + cudaGetErrorName(e) + ")";
    return std::string("no CUDA device: ") + cudaGetErrorString(e);
  }
  if (index >= count)
    return "no CUDA device " + std::to_string(index) + " (this machine has " + std::to_string(count) + ")";
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, index) != cudaSuccess) return "cannot read CUDA device " + std::to_string(index);
  if (p.major < 8)
    return std::string(p.name) + " is sm_" + std::to_string(p.major * 10 + p.minor) +
           "; the CUDA backend runs on sm_80 (A100-class) and later";
  return "";
}

class CudaBackend;

class CudaKV final : public KVStore {
 public:
  CudaKV(const CudaBackend& owner, int64_t capacity);
  int64_t size() const override { return size_; }
  int64_t capacity() const override { return capacity_; }
  void reserve(int64_t n) override;
  void truncate(int64_t n) override {
    if (n < 0 || n > size_)
      throw Error("KV cache truncate to " + std::to_string(n) + " outside [0, " + std::to_string(size_) + "]");
    size_ = n;
  }
  void keep(int64_t base, const std::vector<int64_t>& rows) override;
  size_t bytes() const override { return k_.bytes() + v_.bytes(); }

  const CudaBackend* owner() const { return owner_; }
  void* k() const { return k_.get(); }
  void* v() const { return v_.get(); }
  void commit(int64_t n) { size_ += n; }

 private:
  const CudaBackend* owner_;
  int64_t size_ = 0, capacity_ = 0;
  DeviceBuffer k_, v_;
};

// Runs a forward's on_layer calls on its own thread, each once its rows
// have reached the host, while the GPU goes on with later layers.
class TapWorker {
 public:
  struct Job {
    int device = 0;
    int64_t layer = 0;
    cudaEvent_t ready = nullptr;
    const float* rows = nullptr;  // [n, hidden], host
    int64_t hidden = 0;
    struct Target {
      const ForwardRequest* request;
      int64_t row0, rows;
    };
    std::vector<Target> targets;
  };
  TapWorker() : thread_([this] { loop(); }) {}
  ~TapWorker() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(Job job) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      jobs_.push_back(std::move(job));
      ++pending_;
    }
    cv_.notify_all();
  }
  // Waits for every job posted; rethrows the first error one raised.
  void drain() {
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return pending_ == 0; });
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      const bool skip = error_ != nullptr;
      lk.unlock();
      try {
        if (!skip) {
          set_device(job.device);
          SPLITSPEC_CUDA(cudaEventSynchronize(job.ready));
          for (const Job::Target& t : job.targets)
            t.request->on_layer(job.layer, RowsView{job.rows + t.row0 * job.hidden, t.rows, job.hidden});
        }
      } catch (...) {
        lk.lock();
        if (!error_) error_ = std::current_exception();
        lk.unlock();
      }
      lk.lock();
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Job> jobs_;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

// Device and pinned memory a forward reuses, grown as forwards need.
struct Workspace {
  DeviceBuffer step;
  PinnedBuffer step_host;
  DeviceBuffer x, h, q, k, v, attn, delta, gate, up, attn_partial, normed, logits, argmax;
  LinearScratch scratch;
  PinnedBuffer logits_host, argmax_host, normed_host;
  struct Tap {
    DeviceBuffer rows;
    PinnedBuffer host;
    cudaEvent_t snapshot = nullptr, copied = nullptr;
  };
  std::deque<Tap> taps;  // never moved: events and pinned memory
};

// The shape a captured forward was captured for: rows, sequences, logits
// rows, and attention's bound on the visible lists (a power of two of spans).
struct GraphKey {
  int64_t rows, sequences, logits_rows;
  int32_t spans;
  bool operator<(const GraphKey& o) const {
    return std::tie(rows, sequences, logits_rows, spans) < std::tie(o.rows, o.sequences, o.logits_rows, o.spans);
  }
};

class GraphExec {
 public:
  explicit GraphExec(cudaGraphExec_t g) : g_(g) {}
  GraphExec(GraphExec&& o) noexcept : g_(o.g_) { o.g_ = nullptr; }
  GraphExec(const GraphExec&) = delete;
  ~GraphExec() {
    if (g_) cudaGraphExecDestroy(g_);
  }
  cudaGraphExec_t get() const { return g_; }

 private:
  cudaGraphExec_t g_;
};

class CudaBackend final : public Backend, public std::enable_shared_from_this<CudaBackend> {
 public:
  CudaBackend(const std::string& path, const BackendOptions& o) {
    // What the files hold is refused before any GPU is asked for.
    source_ = std::make_unique<ModelSource>(open_model_source(path));
    config_ = source_->config;
    name_ = source_->name;
    check_config();
    check_types(*source_);
    init_device(o);
    digest_ = source_digest(config_, source_->tensors);
    upload(*source_);
    finish_setup();
  }

  CudaBackend(const ModelConfig& c, WType type, uint64_t seed, float scale, const BackendOptions& o) {
    init_device(o);
    config_ = c;
    config_.validate("random model config");
    name_ = "random-" + std::to_string(seed);
    check_config();
    make_random(type, seed, scale);
    finish_setup();
  }

  ~CudaBackend() override {
    tap_worker_.reset();
    cudaSetDevice(device_);
    for (Workspace::Tap& t : ws_.taps) {
      if (t.snapshot) cudaEventDestroy(t.snapshot);
      if (t.copied) cudaEventDestroy(t.copied);
    }
    if (stream_) cudaStreamDestroy(stream_);
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
  }

  const ModelConfig& config() const override { return config_; }
  const std::string& name() const override { return name_; }
  Numerics numerics() const override {
    return {"cuda", arch_, kKernelsVersion, wtype_name(weight_type_), digest_, kv_type_name(kv_type_)};
  }
  std::string device() const override { return device_text_; }
  WType weight_type() const override { return weight_type_; }
  KVType kv_type() const override { return kv_type_; }
  size_t weight_bytes() const override { return weight_bytes_; }
  std::unique_ptr<KVStore> new_kv(int64_t capacity) const override {
    return std::make_unique<CudaKV>(*this, capacity);
  }
  size_t kv_bytes_per_position() const override {
    return 2 * static_cast<size_t>(config_.num_hidden_layers * config_.num_key_value_heads * config_.head_dim) *
           (kv_type_ == KVType::F16 ? 2 : 4);
  }
  uint64_t device_memory_free() const override {
    std::lock_guard<std::mutex> lk(mu_);
    set_device(device_);
    size_t free = 0, total = 0;
    SPLITSPEC_CUDA(cudaMemGetInfo(&free, &total));
    return free;
  }
  std::vector<ForwardResult> forward_batch(const std::vector<Item>& items) const override;
  const float* final_norm() const override { return final_norm_host_.data(); }
  Rows head_rows(const std::vector<int64_t>& ids) const override {
    const MatrixRef head = host_head();
    Rows out(static_cast<int64_t>(ids.size()), config_.hidden_size);
    for (size_t i = 0; i < ids.size(); ++i) dequantize_rows(head, ids[i], ids[i] + 1, out.row(static_cast<int64_t>(i)));
    return out;
  }
  Rows head_logits(RowsView hidden) const override {
    const MatrixRef head = host_head();
    Rows normed(hidden.rows, config_.hidden_size), logits(hidden.rows, config_.vocab_size);
    kernels::rms_norm(hidden.data, hidden.rows, config_.hidden_size, final_norm_host_.data(),
                      static_cast<float>(config_.rms_norm_eps), normed.data());
    kernels::linear(normed.data(), hidden.rows, head, logits.data());
    return logits;
  }
  std::string fatal_error() const override {
    std::lock_guard<std::mutex> lk(fatal_mu_);
    return fatal_;
  }

  // For the KV stores.
  int device_index() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  std::mutex& mutex() const { return mu_; }
  // Runs `f` under the backend's lock on its device; a sticky error marks the
  // backend as lost before it is thrown.
  template <typename F>
  void guarded(F&& f) const {
    try {
      set_device(device_);
      f();
    } catch (const Error&) {
      note_sticky();
      throw;
    }
  }
  void note_sticky() const {
    const cudaError_t e = cudaPeekAtLastError();
    if (!sticky(e)) return;
    std::lock_guard<std::mutex> lk(fatal_mu_);
    if (fatal_.empty()) fatal_ = std::string("CUDA error ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  }

 private:
  struct Layer {
    std::array<DeviceMatrix, kLayerMatrices> m;
    const DeviceMatrix& at(LayerMatrix which) const { return m[static_cast<int>(which)]; }
    const float* input_norm = nullptr;
    const float* post_norm = nullptr;
    std::array<const float*, kLayerVectors> vectors{};
  };

  void init_device(const BackendOptions& o) {
    device_ = o.device.index;
    kv_type_ = o.kv_type;
    if (o.weight_type)
      throw Error(std::string("device ") + o.device.str() + " runs a model at the types its file stores; drop dtype " +
                  wtype_name(*o.weight_type) + " (convert the file instead)");
    const std::string why = unusable(device_);
    if (!why.empty()) throw Error("device " + o.device.str() + ": " + why);
    set_device(device_);
    cudaDeviceProp p{};
    SPLITSPEC_CUDA(cudaGetDeviceProperties(&p, device_));
    arch_ = "sm_" + std::to_string(p.major * 10 + p.minor);
    device_text_ = "cuda:" + std::to_string(device_) + " " + device_name(device_);
    SPLITSPEC_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    SPLITSPEC_CUDA(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    tap_worker_ = std::make_unique<TapWorker>();
  }

  void check_config() const {
    const ModelConfig& c = config_;
    // What the GPU's forward does not compute yet is refused by name, never
    // run as another function.
    if (c.activation != Activation::kSilu || c.post_norms || c.scale_embeddings || c.sliding_window_pattern > 0 ||
        c.query_pre_attn_scalar > 0)
      throw Error("device cuda: the " + c.architecture +
                  " family (GeGLU, its post norms and sliding-window layers) does not run on the GPU yet; run it with "
                  "--device cpu");
    if (c.has_recurrent_layers() || c.attn_output_gate)
      throw Error("device cuda: the " + c.architecture +
                  " family (gated delta-rule layers, gated attention) does not run on the GPU yet; run it with "
                  "--device cpu");
    if (c.rotary_dim > 0)
      throw Error("device cuda: partial rotary embeddings (" + std::to_string(c.rotary_dim) + " of " +
                  std::to_string(c.head_dim) + " dims) do not run on the GPU yet; run it with --device cpu");
    if (c.head_dim > 256 || c.head_dim % 2 != 0)
      throw Error("device cuda: head_dim " + std::to_string(c.head_dim) + " (the GPU's attention takes even head sizes up to 256)");
    if (c.num_attention_heads % c.num_key_value_heads != 0 || c.num_attention_heads / c.num_key_value_heads > 16)
      throw Error("device cuda: " + std::to_string(c.num_attention_heads) + " query heads over " +
                  std::to_string(c.num_key_value_heads) + " key-value heads (the GPU's attention groups up to 16)");
  }

  // Every matrix of a type the GPU runs, or an error naming the first that
  // is not and what the GPU runs.
  void check_types(const ModelSource& src) const {
    const ModelConfig& c = config_;
    auto check = [&](const std::string& name, const std::vector<int64_t>& shape) {
      const WType t = src.tensors(name, shape).type;
      if (!gpu_runs(t))
        throw Error(src.where + ": tensor '" + name + "' is " + wtype_name(t) + "; the GPU runs " + gpu_weight_types() +
                    ": requantize the model (llama-quantize Q4_K_M or Q8_0) or run it on the CPU");
    };
    check(kEmbedName, {c.vocab_size, c.hidden_size});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      for (LayerMatrix m : layer_matrices(c, l)) check(layer_matrix_name(l, m), layer_matrix_shape(m, c, l));
    if (!c.tie_word_embeddings) check(kHeadName, {c.vocab_size, c.hidden_size});
  }

  // Norms and vectors as one float buffer; layer pointers into it.
  void upload_vectors(const std::vector<float>& all) {
    vectors_ = DeviceBuffer(all.size() * sizeof(float));
    SPLITSPEC_CUDA(cudaMemcpy(vectors_.get(), all.data(), all.size() * sizeof(float), cudaMemcpyHostToDevice));
  }

  void upload(const ModelSource& src) {
    const ModelConfig& c = config_;
    const int64_t H = c.hidden_size;
    DeviceBuffer staging;
    auto take = [&](const std::string& name, const std::vector<int64_t>& shape) -> DeviceMatrix {
      const MatrixRef m = src.tensors(name, shape);
      const int64_t bad = first_non_finite_row(m);
      if (bad >= 0)
        throw Error(src.where + ": tensor '" + name + "' contains NaN or infinite values (row " + std::to_string(bad) + ")");
      matrices_.push_back(upload_matrix(m, staging, stream_));
      weight_bytes_ += matrices_.back().bytes();
      return matrices_.back().view();
    };
    auto floats = [&](const std::string& name, int64_t size, std::vector<float>& out) {
      const MatrixRef v = src.tensors(name, {size});
      if (is_block_type(v.type)) throw Error(src.where + ": vector '" + name + "' must be F32, F16 or BF16");
      const size_t at = out.size();
      out.resize(at + static_cast<size_t>(size));
      dequantize_rows(v, 0, 1, out.data() + at);
      return at;
    };
    embed_ = take(kEmbedName, {c.vocab_size, H});
    layers_.resize(static_cast<size_t>(c.num_hidden_layers));
    std::vector<float> all;
    struct At {
      size_t input, post;
      std::array<int64_t, kLayerVectors> vectors;
    };
    std::vector<At> at(layers_.size());
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      for (LayerMatrix m : layer_matrices(c, l))
        layers_[l].m[static_cast<int>(m)] = take(layer_matrix_name(l, m), layer_matrix_shape(m, c, l));
      at[l].input = floats(layer_norm_name(l, false), H, all);
      at[l].post = floats(layer_norm_name(l, true), H, all);
      for (int v = 0; v < kLayerVectors; ++v) {
        const int64_t size = layer_vector_size(static_cast<LayerVector>(v), c, l);
        at[l].vectors[v] = size ? static_cast<int64_t>(floats(layer_vector_name(l, static_cast<LayerVector>(v)), size, all)) : -1;
      }
    }
    const size_t final_at = floats(kFinalNormName, H, all);
    for (float x : all)
      if (!std::isfinite(x)) throw Error(src.where + ": a norm or bias holds NaN or infinite values");
    head_ = c.tie_word_embeddings ? embed_ : take(kHeadName, {c.vocab_size, H});
    final_norm_host_.assign(all.begin() + static_cast<int64_t>(final_at), all.begin() + static_cast<int64_t>(final_at) + H);
    upload_vectors(all);
    weight_bytes_ += all.size() * sizeof(float);
    const float* base = vectors_.as<float>();
    for (size_t l = 0; l < layers_.size(); ++l) {
      layers_[l].input_norm = base + at[l].input;
      layers_[l].post_norm = base + at[l].post;
      for (int v = 0; v < kLayerVectors; ++v)
        layers_[l].vectors[v] = at[l].vectors[v] < 0 ? nullptr : base + at[l].vectors[v];
    }
    final_norm_ = base + final_at;
    weight_type_ = layers_.empty() ? embed_.type : layers_[0].m[0].type;
  }

  void make_random(WType type, uint64_t seed, float scale) {
    if (type != WType::BF16 && type != WType::Q4_K && type != WType::F16 && type != WType::F32)
      throw Error(std::string("random GPU targets are bf16, f16, f32 or q4_k (Q4_K_M), not ") + wtype_name(type));
    const ModelConfig& c = config_;
    const int64_t H = c.hidden_size;
    uint64_t next = seed * 1000003ull;
    auto make = [&](WType t, const std::vector<int64_t>& shape) {
      matrices_.push_back(random_matrix(t, shape[0], shape[1], scale, ++next, stream_));
      weight_bytes_ += matrices_.back().bytes();
      return matrices_.back().view();
    };
    const bool mix = type == WType::Q4_K;
    embed_ = make(mix ? tensor_type(type, embed_slot(c)) : type, {c.vocab_size, H});
    layers_.resize(static_cast<size_t>(c.num_hidden_layers));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      for (LayerMatrix lm : layer_matrices(c, l))
        layers_[l].m[static_cast<int>(lm)] =
            make(mix ? tensor_type(type, layer_slot(c, l, lm)) : type, layer_matrix_shape(lm, c, l));
    head_ = c.tie_word_embeddings ? embed_ : make(mix ? tensor_type(type, head_slot(c)) : type, {c.vocab_size, H});
    // Norms near 1, then every vector the family has (biases, head norms).
    int64_t floats = (2 * c.num_hidden_layers + 1) * H;
    // (Every layer alike: check_config refused the hybrid families.)
    for (int v = 0; v < kLayerVectors; ++v) floats += c.num_hidden_layers * layer_vector_size(static_cast<LayerVector>(v), c, 0);
    vectors_ = DeviceBuffer(static_cast<size_t>(floats) * sizeof(float));
    random_gains(vectors_.as<float>(), floats, 0.1f, ++next, stream_);
    SPLITSPEC_CUDA(cudaStreamSynchronize(stream_));
    weight_bytes_ += static_cast<size_t>(floats) * sizeof(float);
    const float* base = vectors_.as<float>();
    int64_t at = 0;
    for (Layer& layer : layers_) {
      layer.input_norm = base + at;
      layer.post_norm = base + at + H;
      at += 2 * H;
    }
    final_norm_ = base + at;
    at += H;
    for (Layer& layer : layers_)
      for (int v = 0; v < kLayerVectors; ++v) {
        const int64_t size = layer_vector_size(static_cast<LayerVector>(v), c, 0);
        layer.vectors[v] = size ? base + at : nullptr;
        at += size;
      }
    final_norm_host_.resize(static_cast<size_t>(H));
    SPLITSPEC_CUDA(cudaMemcpy(final_norm_host_.data(), final_norm_, H * sizeof(float), cudaMemcpyDeviceToHost));
    weight_type_ = layers_.empty() ? embed_.type : layers_[0].m[0].type;
    digest_.clear();
  }

  void finish_setup() {
    std::vector<float> cos, sin;
    rope_tables(config_, cos, sin);
    rope_ = DeviceBuffer(2 * cos.size() * sizeof(float));
    SPLITSPEC_CUDA(cudaMemcpy(rope_.get(), cos.data(), cos.size() * sizeof(float), cudaMemcpyHostToDevice));
    SPLITSPEC_CUDA(cudaMemcpy(rope_.as<float>() + cos.size(), sin.data(), sin.size() * sizeof(float),
                              cudaMemcpyHostToDevice));
    rope_half_ = cos.size();
    // Distinct matrix shapes, for the linear scratch a forward needs.
    std::map<std::tuple<int, int64_t, int64_t>, DeviceMatrix> shapes;
    auto note = [&](const DeviceMatrix& m) { shapes[{static_cast<int>(m.type), m.rows, m.cols}] = m; };
    for (const Layer& l : layers_)
      for (const DeviceMatrix& m : l.m) note(m);
    note(head_);
    for (const auto& [key, m] : shapes) shapes_.push_back(m);
  }

  MatrixRef host_head() const {
    if (!source_) throw Error(name_ + ": a random GPU target has no host copy of its head");
    const MatrixRef m = source_->tensors(config_.tie_word_embeddings ? kEmbedName : kHeadName,
                                         {config_.vocab_size, config_.hidden_size});
    return m;
  }

  // Grows the workspace for a forward of this shape; true when any device
  // buffer moved.
  bool ensure_workspace(int64_t n, int64_t m, int32_t max_len, size_t step_bytes, size_t taps) const;
  // The kernels `enqueue` launches on the stream, captured as a graph.
  template <typename F>
  GraphExec capture(F&& enqueue) const {
    SPLITSPEC_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue();
    } catch (...) {
      cudaGraph_t dropped = nullptr;
      cudaStreamEndCapture(stream_, &dropped);
      if (dropped) cudaGraphDestroy(dropped);
      throw;
    }
    cudaGraph_t graph = nullptr;
    SPLITSPEC_CUDA(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(e, "cudaGraphInstantiate");
    return GraphExec(exec);
  }

  ModelConfig config_;
  std::string name_;
  KVType kv_type_ = KVType::F32;
  int device_ = 0;
  std::string device_text_, arch_;
  WType weight_type_ = WType::F32;
  std::string digest_;
  size_t weight_bytes_ = 0;
  std::unique_ptr<ModelSource> source_;  // the file, for the exits' head on the host
  std::vector<OwnedMatrix> matrices_;
  DeviceMatrix embed_, head_;
  std::vector<Layer> layers_;
  std::vector<DeviceMatrix> shapes_;
  DeviceBuffer vectors_, rope_;
  size_t rope_half_ = 0;  // floats in the cos table
  const float* final_norm_ = nullptr;
  std::vector<float> final_norm_host_;
  cudaStream_t stream_ = nullptr, copy_stream_ = nullptr;
  std::unique_ptr<TapWorker> tap_worker_;
  mutable std::mutex mu_;
  mutable Workspace ws_;
  // Forwards without taps run as graphs of their shape (SPLITSPEC_CUDA_GRAPHS=0: never).
  bool graphs_on_ = [] {
    const char* env = std::getenv("SPLITSPEC_CUDA_GRAPHS");
    return !(env && std::string(env) == "0");
  }();
  mutable std::map<GraphKey, GraphExec> graphs_;
  mutable std::mutex fatal_mu_;
  mutable std::string fatal_;
};

CudaKV::CudaKV(const CudaBackend& owner, int64_t capacity) : owner_(&owner) {
  const ModelConfig& c = owner.config();
  if (capacity <= 0 || capacity > c.max_position_embeddings)
    throw Error("KV cache capacity " + std::to_string(capacity) + " must be in [1, max_position_embeddings=" +
                std::to_string(c.max_position_embeddings) + "]");
  const size_t bytes = owner.kv_bytes_per_position() / 2 * static_cast<size_t>(capacity);
  std::lock_guard<std::mutex> lk(owner.mutex());
  owner.guarded([&] {
    k_ = DeviceBuffer(bytes);
    v_ = DeviceBuffer(bytes);
  });
  capacity_ = capacity;
}

void CudaKV::reserve(int64_t n) {
  if (n <= capacity_) return;
  const ModelConfig& c = owner_->config();
  if (n > c.max_position_embeddings)
    throw Error("KV cache capacity " + std::to_string(n) + " exceeds max_position_embeddings=" +
                std::to_string(c.max_position_embeddings));
  const size_t bytes = owner_->kv_bytes_per_position() / 2 * static_cast<size_t>(n);
  std::lock_guard<std::mutex> lk(owner_->mutex());
  owner_->guarded([&] {
    DeviceBuffer k(bytes), v(bytes);
    kv_copy(k_.get(), v_.get(), capacity_, k.get(), v.get(), n, c.num_hidden_layers, c.num_key_value_heads, c.head_dim,
            owner_->kv_type() == KVType::F16, size_, owner_->stream());
    SPLITSPEC_CUDA(cudaStreamSynchronize(owner_->stream()));
    k_ = std::move(k);
    v_ = std::move(v);
  });
  capacity_ = n;
}

void CudaKV::keep(int64_t base, const std::vector<int64_t>& rows) {
  if (base < 0 || base > size_) throw Error("KV cache keep: base " + std::to_string(base) + " out of range");
  const int64_t appended = size_ - base;
  bool moves = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= appended || (i > 0 && rows[i] <= rows[i - 1]))
      throw Error("KV cache keep: rows must be strictly increasing offsets in [0, " + std::to_string(appended) + ")");
    moves = moves || rows[i] != static_cast<int64_t>(i);
  }
  if (moves) {
    const ModelConfig& c = owner_->config();
    std::vector<int32_t> keep(rows.begin(), rows.end());
    std::lock_guard<std::mutex> lk(owner_->mutex());
    owner_->guarded([&] {
      DeviceBuffer list(keep.size() * sizeof(int32_t));
      SPLITSPEC_CUDA(cudaMemcpyAsync(list.get(), keep.data(), keep.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                     owner_->stream()));
      kv_keep(k_.get(), v_.get(), c.num_hidden_layers, c.num_key_value_heads, capacity_, c.head_dim,
              owner_->kv_type() == KVType::F16, base, list.as<int32_t>(), static_cast<int64_t>(keep.size()),
              owner_->stream());
      SPLITSPEC_CUDA(cudaStreamSynchronize(owner_->stream()));
    });
  }
  size_ = base + static_cast<int64_t>(rows.size());
}

bool CudaBackend::ensure_workspace(int64_t n, int64_t m, int32_t max_len, size_t step_bytes, size_t taps) const {
  const ModelConfig& c = config_;
  const size_t f = sizeof(float);
  bool moved = false;
  // Room to spare, so that a context that grows moves the buffers (and drops
  // the graphs) a few times, not at every step.
  auto grow = [](DeviceBuffer& b, size_t bytes) {
    if (bytes <= b.bytes()) return false;
    size_t round = 256;
    while (round < bytes) round *= 2;
    b.ensure(round);
    return true;
  };
  const int64_t H = c.hidden_size, Q = c.num_attention_heads * c.head_dim, KV = c.num_key_value_heads * c.head_dim;
  moved |= grow(ws_.step, step_bytes);
  ws_.step_host.ensure(step_bytes);
  moved |= grow(ws_.x, n * H * f);
  moved |= grow(ws_.h, n * H * f);
  moved |= grow(ws_.q, n * Q * f);
  moved |= grow(ws_.k, n * KV * f);
  moved |= grow(ws_.v, n * KV * f);
  moved |= grow(ws_.attn, n * Q * f);
  moved |= grow(ws_.delta, n * H * f);
  moved |= grow(ws_.gate, n * c.intermediate_size * f);
  moved |= grow(ws_.up, n * c.intermediate_size * f);
  AttentionShape s{n, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.num_hidden_layers,
                   kv_type_ == KVType::F16};
  moved |= grow(ws_.attn_partial, attention_scratch(s, max_len));
  ScratchNeed need;
  for (const DeviceMatrix& w : shapes_) {
    const ScratchNeed a = linear_scratch(w, n);
    need.xq = std::max(need.xq, a.xq);
    need.xd = std::max(need.xd, a.xd);
    need.bsums = std::max(need.bsums, a.bsums);
    need.xt = std::max(need.xt, a.xt);
    need.partials = std::max(need.partials, a.partials);
  }
  moved |= grow(ws_.scratch.xq, need.xq);
  moved |= grow(ws_.scratch.xd, need.xd);
  moved |= grow(ws_.scratch.bsums, need.bsums);
  moved |= grow(ws_.scratch.xt, need.xt);
  moved |= grow(ws_.scratch.partials, need.partials);
  moved |= grow(ws_.normed, std::max<int64_t>(m, 1) * H * f);
  moved |= grow(ws_.logits, std::max<int64_t>(m, 1) * c.vocab_size * f);
  moved |= grow(ws_.argmax, std::max<int64_t>(m, 1) * sizeof(int32_t));
  ws_.logits_host.ensure(std::max<int64_t>(m, 1) * c.vocab_size * f);
  ws_.argmax_host.ensure(std::max<int64_t>(m, 1) * sizeof(int32_t));
  ws_.normed_host.ensure(std::max<int64_t>(m, 1) * H * f);
  while (ws_.taps.size() < taps) {
    ws_.taps.emplace_back();
    SPLITSPEC_CUDA(cudaEventCreateWithFlags(&ws_.taps.back().snapshot, cudaEventDisableTiming));
    SPLITSPEC_CUDA(cudaEventCreateWithFlags(&ws_.taps.back().copied, cudaEventDisableTiming));
  }
  for (size_t i = 0; i < taps; ++i) {
    moved |= grow(ws_.taps[i].rows, n * H * f);
    ws_.taps[i].host.ensure(n * H * f);
  }
  return moved;
}

std::vector<ForwardResult> CudaBackend::forward_batch(const std::vector<Item>& items) const {
  const ModelConfig& c = config_;
  if (items.empty()) throw Error("forward: an empty batch");
  {
    std::lock_guard<std::mutex> lk(fatal_mu_);
    if (!fatal_.empty()) throw Error("device " + device_text_ + " is lost: " + fatal_);
  }
  // Checks first, exactly as the CPU's forward checks.
  std::vector<CudaKV*> kvs;
  std::vector<std::vector<std::vector<int32_t>>> visible;
  int64_t n = 0;
  for (size_t b = 0; b < items.size(); ++b) {
    auto* kv = dynamic_cast<CudaKV*>(items[b].kv);
    if (!kv || kv->owner() != this) throw Error("forward: a KV store made by another backend than " + device_text_);
    for (size_t a = 0; a < b; ++a)
      if (kvs[a] == kv) throw Error("forward: two sequences of one batch share a KV cache");
    kvs.push_back(kv);
    visible.push_back(check_forward_request(c, *items[b].request, kv->size(), kv->capacity()));
    n += static_cast<int64_t>(items[b].request->tokens.size());
  }
  const int64_t H = c.hidden_size, V = c.vocab_size, L = c.num_hidden_layers;

  // The step's inputs, one copy to the device.
  std::vector<int32_t> ids, positions, row_seq, extras, logits_rows, rows_of_seq;
  std::vector<SeqKV> seqs;
  std::vector<RowVisibility> vis;
  std::vector<int64_t> logits_first;  // per sequence: its first row in the logits
  int32_t max_len = 0;
  for (size_t b = 0; b < items.size(); ++b) {
    const ForwardRequest& req = *items[b].request;
    const int64_t rows = static_cast<int64_t>(req.tokens.size()), past = kvs[b]->size();
    SeqKV s;
    s.k = kvs[b]->k();
    s.v = kvs[b]->v();
    s.capacity = kvs[b]->capacity();
    s.past = static_cast<int32_t>(past);
    s.row0 = static_cast<int32_t>(ids.size());
    s.rows = static_cast<int32_t>(rows);
    logits_first.push_back(static_cast<int64_t>(logits_rows.size()));
    for (int64_t i = 0; i < rows; ++i) {
      ids.push_back(req.tokens[i]);
      positions.push_back(static_cast<int32_t>(req.positions.empty() ? past + i : req.positions[i]));
      row_seq.push_back(static_cast<int32_t>(b));
      const std::vector<int32_t>& list = visible[b][i];
      RowVisibility r;
      r.seq = static_cast<int32_t>(b);
      int32_t prefix = 0;
      while (prefix < static_cast<int32_t>(list.size()) && list[prefix] == prefix) ++prefix;
      r.prefix = prefix;
      r.begin = static_cast<int32_t>(extras.size());
      extras.insert(extras.end(), list.begin() + prefix, list.end());
      r.end = static_cast<int32_t>(extras.size());
      max_len = std::max<int32_t>(max_len, static_cast<int32_t>(list.size()));
      vis.push_back(r);
    }
    if (req.logits_rows) {
      for (int64_t r : *req.logits_rows) logits_rows.push_back(static_cast<int32_t>(s.row0 + r));
    } else {
      for (int64_t i = 0; i < rows; ++i) logits_rows.push_back(static_cast<int32_t>(s.row0 + i));
    }
    seqs.push_back(s);
  }
  const int64_t m = static_cast<int64_t>(logits_rows.size());
  // Never empty, so that every piece has an address.
  if (extras.empty()) extras.push_back(0);
  std::vector<int32_t> logits_list = logits_rows;
  if (logits_list.empty()) logits_list.push_back(0);
  // Pieces whose sizes follow the batch's shape first, the extra slots
  // last: the pieces' addresses are then the same for every forward of one
  // shape, as a CUDA graph of that shape has them.
  Staging st;
  const size_t at_ids = st.add(ids.data(), ids.size()), at_pos = st.add(positions.data(), positions.size());
  const size_t at_row_seq = st.add(row_seq.data(), row_seq.size());
  const size_t at_seqs = st.add(seqs.data(), seqs.size()), at_vis = st.add(vis.data(), vis.size());
  const size_t at_logits = st.add(logits_list.data(), logits_list.size());
  const size_t at_extras = st.add(extras.data(), extras.size());

  // Which layers hand their rows to the host, and to whom.
  std::map<int64_t, std::vector<TapWorker::Job::Target>> calls;
  std::map<int64_t, bool> wanted;  // layer -> has a hidden_layers request
  for (size_t b = 0; b < items.size(); ++b) {
    const ForwardRequest& req = *items[b].request;
    for (int64_t l : req.hidden_layers) wanted[l] = true;
    if (req.on_layer) {
      if (req.tap_layers.empty())
        for (int64_t l = 0; l < L; ++l) calls[l].push_back({&req, seqs[b].row0, seqs[b].rows});
      else
        for (int64_t l : req.tap_layers) calls[l].push_back({&req, seqs[b].row0, seqs[b].rows});
    }
  }
  std::map<int64_t, size_t> tap_slot;
  for (const auto& [l, t] : calls) tap_slot.emplace(l, tap_slot.size());
  for (const auto& [l, w] : wanted) tap_slot.emplace(l, tap_slot.size());

  // Attention's grid covers a power of two of spans, so that one graph
  // serves a context as it grows.
  int32_t span_bucket = 1;
  while (span_bucket * kAttentionSpan < max_len) span_bucket *= 2;
  const int32_t len_bound = span_bucket * kAttentionSpan;
  bool all_logits = false, any_hidden = false;
  for (const Item& it : items) {
    all_logits = all_logits || !it.request->argmax_only;
    any_hidden = any_hidden || it.request->final_hidden;
    if (!it.request->final_hidden_rows.empty() || !it.request->inputs.empty())
      throw Error("device cuda: hidden rows without logits and inputs other than embeddings (a model's own MTP "
                  "head) are not on the GPU yet; run the target with --device cpu");
  }

  std::lock_guard<std::mutex> lk(mu_);
  std::vector<ForwardResult> out(items.size());
  try {
    set_device(device_);
    // Memory that moved invalidates every graph, which hold its addresses.
    if (ensure_workspace(n, m, len_bound, st.bytes().size(), tap_slot.size())) graphs_.clear();
    std::memcpy(ws_.step_host.get(), st.bytes().data(), st.bytes().size());
    SPLITSPEC_CUDA(cudaMemcpyAsync(ws_.step.get(), ws_.step_host.get(), st.bytes().size(), cudaMemcpyHostToDevice, stream_));
    auto step = [&](size_t at) { return reinterpret_cast<const uint8_t*>(ws_.step.get()) + at; };
    const auto* d_ids = reinterpret_cast<const int32_t*>(step(at_ids));
    const auto* d_pos = reinterpret_cast<const int32_t*>(step(at_pos));
    const auto* d_row_seq = reinterpret_cast<const int32_t*>(step(at_row_seq));
    const auto* d_extras = reinterpret_cast<const int32_t*>(step(at_extras));
    const auto* d_logits_rows = reinterpret_cast<const int32_t*>(step(at_logits));
    const auto* d_seqs = reinterpret_cast<const SeqKV*>(step(at_seqs));
    const auto* d_vis = reinterpret_cast<const RowVisibility*>(step(at_vis));

    const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, D = c.head_dim, I = c.intermediate_size;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    const float* cos = rope_.as<float>();
    const float* sin = cos + rope_half_;
    float* x = ws_.x.as<float>();
    float* h = ws_.h.as<float>();
    float* q = ws_.q.as<float>();
    float* k = ws_.k.as<float>();
    float* v = ws_.v.as<float>();
    float* attn = ws_.attn.as<float>();
    float* delta = ws_.delta.as<float>();
    float* gate = ws_.gate.as<float>();
    float* up = ws_.up.as<float>();
    const AttentionShape shape{n, Hq, Hkv, D, L, kv_type_ == KVType::F16};
    // Matrices that share an input share its quantization (or tiling).
    const float* prepared_for = nullptr;
    DeviceMatrix prepared_as;
    auto lin = [&](const DeviceMatrix& w, const float* in, int64_t rows, float* y) {
      const bool prepared = prepared_for == in && same_preparation(prepared_as, w);
      linear(w, in, rows, y, ws_.scratch, prepared, stream_);
      prepared_for = in;
      prepared_as = w;
    };

    // The forward's kernels: launched as they are, or, for a forward with
    // no taps, as a CUDA graph of its shape, captured once and replayed
    // (a decode step is some 20 launches a layer, which the host alone
    // would take longer to issue than the GPU to run).
    auto enqueue = [&] {
      embed(embed_, d_ids, n, x, stream_);
      for (int64_t l = 0; l < L; ++l) {
        const Layer& layer = layers_[l];
        rms_norm(x, n, H, layer.input_norm, eps, h, stream_);
        prepared_for = nullptr;
        lin(layer.at(LayerMatrix::kQ), h, n, q);
        lin(layer.at(LayerMatrix::kK), h, n, k);
        lin(layer.at(LayerMatrix::kV), h, n, v);
        if (c.attention_bias) {
          add_bias(q, n, Hq * D, layer.vectors[static_cast<int>(LayerVector::kQBias)], stream_);
          add_bias(k, n, Hkv * D, layer.vectors[static_cast<int>(LayerVector::kKBias)], stream_);
          add_bias(v, n, Hkv * D, layer.vectors[static_cast<int>(LayerVector::kVBias)], stream_);
        }
        if (c.qk_norm) {
          // Each head's rows normed on their own, in place.
          rms_norm(q, n * Hq, D, layer.vectors[static_cast<int>(LayerVector::kQNorm)], eps, q, stream_);
          rms_norm(k, n * Hkv, D, layer.vectors[static_cast<int>(LayerVector::kKNorm)], eps, k, stream_);
        }
        rope(q, n, Hq, D, d_pos, cos, sin, stream_);
        rope(k, n, Hkv, D, d_pos, cos, sin, stream_);
        kv_write(shape, l, d_seqs, static_cast<int64_t>(seqs.size()), d_row_seq, k, v, stream_);
        attention(shape, l, d_seqs, d_vis, d_extras, q, scale, len_bound, ws_.attn_partial.get(), attn, stream_);
        lin(layer.at(LayerMatrix::kO), attn, n, delta);
        add_inplace(x, delta, n * H, stream_);
        rms_norm(x, n, H, layer.post_norm, eps, h, stream_);
        prepared_for = nullptr;
        lin(layer.at(LayerMatrix::kGate), h, n, gate);
        lin(layer.at(LayerMatrix::kUp), h, n, up);
        silu_mul(gate, up, n * I, stream_);
        prepared_for = nullptr;
        lin(layer.at(LayerMatrix::kDown), gate, n, delta);
        add_inplace(x, delta, n * H, stream_);
        const auto slot = tap_slot.find(l);
        if (slot != tap_slot.end()) {
          // A snapshot, so that later layers may overwrite x while it travels.
          Workspace::Tap& t = ws_.taps[slot->second];
          const size_t bytes = static_cast<size_t>(n * H) * sizeof(float);
          SPLITSPEC_CUDA(cudaMemcpyAsync(t.rows.get(), x, bytes, cudaMemcpyDeviceToDevice, stream_));
          SPLITSPEC_CUDA(cudaEventRecord(t.snapshot, stream_));
          SPLITSPEC_CUDA(cudaStreamWaitEvent(copy_stream_, t.snapshot, 0));
          SPLITSPEC_CUDA(cudaMemcpyAsync(t.host.get(), t.rows.get(), bytes, cudaMemcpyDeviceToHost, copy_stream_));
          SPLITSPEC_CUDA(cudaEventRecord(t.copied, copy_stream_));
          const auto who = calls.find(l);
          if (who != calls.end())
            tap_worker_->post({device_, l, t.copied, t.host.as<float>(), H, who->second});
        }
      }
      if (m > 0) {
        float* normed = ws_.normed.as<float>();
        float* logits = ws_.logits.as<float>();
        rms_norm_rows(x, d_logits_rows, m, H, final_norm_, eps, normed, stream_);
        lin(head_, normed, m, logits);
        argmax_rows(logits, m, V, ws_.argmax.as<int32_t>(), stream_);
      }
    };
    const GraphKey key{n, static_cast<int64_t>(items.size()), m, span_bucket};
    if (graphs_on_ && tap_slot.empty()) {
      auto found = graphs_.find(key);
      if (found == graphs_.end()) found = graphs_.emplace(key, capture(enqueue)).first;
      SPLITSPEC_CUDA(cudaGraphLaunch(found->second.get(), stream_));
    } else {
      enqueue();
    }
    if (m > 0) {
      float* normed = ws_.normed.as<float>();
      float* logits = ws_.logits.as<float>();
      SPLITSPEC_CUDA(cudaMemcpyAsync(ws_.argmax_host.get(), ws_.argmax.get(), m * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, stream_));
      if (all_logits)
        SPLITSPEC_CUDA(cudaMemcpyAsync(ws_.logits_host.get(), logits, m * V * sizeof(float), cudaMemcpyDeviceToHost,
                                       stream_));
      if (any_hidden)
        SPLITSPEC_CUDA(cudaMemcpyAsync(ws_.normed_host.get(), normed, m * H * sizeof(float), cudaMemcpyDeviceToHost,
                                       stream_));
    }
    SPLITSPEC_CUDA(cudaStreamSynchronize(stream_));
    SPLITSPEC_CUDA(cudaStreamSynchronize(copy_stream_));
    tap_worker_->drain();

    for (size_t b = 0; b < items.size(); ++b) {
      const ForwardRequest& req = *items[b].request;
      const int64_t first = logits_first[b];
      const int64_t count = (b + 1 < items.size() ? logits_first[b + 1] : m) - first;
      if (req.argmax_only) {
        const auto* am = ws_.argmax_host.as<int32_t>() + first;
        out[b].argmax.assign(am, am + count);
      } else {
        out[b].logits = Rows::copy_of(RowsView{ws_.logits_host.as<float>() + first * V, count, V});
      }
      if (req.final_hidden) out[b].final_hidden = Rows::copy_of(RowsView{ws_.normed_host.as<float>() + first * H, count, H});
      for (int64_t l : req.hidden_layers)
        out[b].hidden[l] = Rows::copy_of(
            RowsView{ws_.taps[tap_slot.at(l)].host.as<float>() + static_cast<int64_t>(seqs[b].row0) * H, seqs[b].rows, H});
    }
  } catch (...) {
    // The GPU may still run this forward's kernels, or the tap thread its
    // calls: wait for both before the caller's rows go away.
    cudaStreamSynchronize(stream_);
    cudaStreamSynchronize(copy_stream_);
    try {
      tap_worker_->drain();
    } catch (...) {
    }
    note_sticky();
    throw;
  }
  // Only now, with nothing left to throw, do the entries become the stores'.
  for (size_t b = 0; b < items.size(); ++b) kvs[b]->commit(static_cast<int64_t>(items[b].request->tokens.size()));
  return out;
}

}  // namespace

std::shared_ptr<Backend> open(const std::string& path, const BackendOptions& options) {
  return std::make_shared<CudaBackend>(path, options);
}

std::shared_ptr<Backend> random(const ModelConfig& config, WType type, uint64_t seed, float scale,
                                const BackendOptions& options) {
  return std::make_shared<CudaBackend>(config, type, seed, scale, options);
}

Status status() {
  Status s;
  const cudaError_t e = cudaGetDeviceCount(&s.devices);
  if (e != cudaSuccess) {
    cudaGetLastError();
    s.devices = 0;
    s.error = cudaGetErrorString(e);
    return s;
  }
  for (int d = 0; d < s.devices; ++d) s.names.push_back(device_name(d));
  if (s.devices == 0) s.error = "no CUDA device";
  return s;
}

void linear(const MatrixRef& w, const float* x, int64_t n, float* y, int device) {
  const std::string why = unusable(device);
  if (!why.empty()) throw Error(why);
  set_device(device);
  cudaStream_t stream;
  SPLITSPEC_CUDA(cudaStreamCreate(&stream));
  struct Done {
    cudaStream_t s;
    ~Done() { cudaStreamDestroy(s); }
  } done{stream};
  DeviceBuffer staging;
  const OwnedMatrix m = upload_matrix(w, staging, stream);
  DeviceBuffer dx(static_cast<size_t>(n * w.cols) * sizeof(float)), dy(static_cast<size_t>(n * w.rows) * sizeof(float));
  LinearScratch scratch;
  const ScratchNeed need = linear_scratch(m.view(), n);
  scratch.xq.ensure(need.xq);
  scratch.xd.ensure(need.xd);
  scratch.bsums.ensure(need.bsums);
  scratch.xt.ensure(need.xt);
  scratch.partials.ensure(need.partials);
  SPLITSPEC_CUDA(cudaMemcpy(dx.get(), x, dx.bytes(), cudaMemcpyHostToDevice));
  // Poisoned, so that an output left unwritten shows.
  SPLITSPEC_CUDA(cudaMemset(dy.get(), 0xff, dy.bytes()));
  linear(m.view(), dx.as<float>(), n, dy.as<float>(), scratch, false, stream);
  SPLITSPEC_CUDA(cudaStreamSynchronize(stream));
  SPLITSPEC_CUDA(cudaMemcpy(y, dy.get(), dy.bytes(), cudaMemcpyDeviceToHost));
}

double copy_rate(int device) {
  const std::string why = unusable(device);
  if (!why.empty()) throw Error(why);
  set_device(device);
  const size_t bytes = size_t{2} << 30;
  DeviceBuffer a(bytes), b(bytes);
  SPLITSPEC_CUDA(cudaMemset(a.get(), 1, bytes));
  cudaEvent_t start, stop;
  SPLITSPEC_CUDA(cudaEventCreate(&start));
  SPLITSPEC_CUDA(cudaEventCreate(&stop));
  SPLITSPEC_CUDA(cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));  // warm
  constexpr int kRepeats = 10;
  SPLITSPEC_CUDA(cudaEventRecord(start));
  for (int i = 0; i < kRepeats; ++i) SPLITSPEC_CUDA(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
  SPLITSPEC_CUDA(cudaEventRecord(stop));
  SPLITSPEC_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  SPLITSPEC_CUDA(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * static_cast<double>(bytes) * kRepeats / (static_cast<double>(ms) / 1e3);
}

}  // namespace splitspec::cuda

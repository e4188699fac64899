#pragma once
// The CUDA backend: the target on an NVIDIA GPU (sm_80 and sm_90 code, PTX
// for later ones). Its weights in layouts of its own (BF16, F16, F32, Q8_0,
// Q4_K, Q6_K: llama.cpp's Q4_K_M files), its KV stores in device memory, its
// forward batch-invariant bit for bit, its quantized products the CPU
// reference's bits (device.h says how). Free of CUDA headers: the server and
// the CLI include it; the client library does not link it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/backend/registry.h"

namespace splitspec::cuda {

// Version of the GPU kernels' arithmetic (Numerics::kernels): raise it with
// any change that moves a result bit.
inline constexpr const char* kKernelsVersion = "1";

// The target at `path` on GPU options.device.index. Throws splitspec::Error
// when there is no GPU (the runtime's reason), for a weight type or family
// the GPU does not run (naming what it runs), and when memory runs out.
std::shared_ptr<Backend> open(const std::string& path, const BackendOptions& options);

// A target of `config`'s shape with random weights made on the GPU (normal
// values of deviation `scale`; BF16, or Q4_K for llama.cpp's Q4_K_M mix,
// quantized by our own quantizer): benchmarks of models no file holds. It
// has no host copy of its head (exits cannot run on it).
std::shared_ptr<Backend> random(const ModelConfig& config, WType type, uint64_t seed, float scale,
                                const BackendOptions& options);

// The GPUs this process sees, or why it sees none.
struct Status {
  int devices = 0;
  std::string error;               // the runtime's reason when devices == 0
  std::vector<std::string> names;  // "NVIDIA H200 (sm_90, 139.8 GiB)"
};
Status status();

// One product on the GPU, for checks against the CPU: y[n, w.rows] =
// x[n, w.cols] . w^T with the plain (file-layout) matrix `w` uploaded, as
// the backend's forward computes it.
void linear(const MatrixRef& w, const float* x, int64_t n, float* y, int device = 0);

// The device's copy rate: bytes read plus bytes written per second by a
// large device-to-device copy (the bandwidth bound's denominator).
double copy_rate(int device = 0);

}  // namespace splitspec::cuda
